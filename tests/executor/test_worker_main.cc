// A bare worker program for the executor tests: the same protocol loop `sweep worker` runs.
#include "executor/worker.h"

int main() {
  return sweep::executor::RunWorker(sweep::executor::kWorkerCommandFd,
                                    sweep::executor::kWorkerMessageFd);
}
