// How a trial task becomes the trainer's options: what the config sets, and what the trial's
// slots give.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "executor/trial.h"

namespace sweep::executor {
namespace {

// A trainer trial trains with the replicas and threads its config sets; what it leaves unset
// comes from its slots.
TEST(TrainerLayoutTest, TheConfigWinsOverTheSlots) {
  TrialTask task;
  task.kind = TrialKind::kTrainer;
  task.threads = 2;
  // Where the files are is not looked at here.
  const nlohmann::json dataset = {{"train_images", "train-images"},
                                  {"train_labels", "train-labels"}};
  task.settings = {{"dataset", dataset}};
  auto slots = TrainerLayoutOf(task);
  ASSERT_TRUE(slots.ok()) << slots.status().message();
  EXPECT_EQ(slots->threads, 2);
  EXPECT_EQ(slots->replicas, 2);
  task.settings = {{"dataset", dataset}, {"threads", 4}};
  task.params = {{"replicas", 1}};
  auto set = TrainerLayoutOf(task);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->threads, 4);
  EXPECT_EQ(set->replicas, 1);
  task.settings = {{"dataset", dataset}};
  task.params = {{"threads", 3}};
  auto param = TrainerLayoutOf(task);
  ASSERT_TRUE(param.ok()) << param.status().message();
  EXPECT_EQ(param->threads, 3);
  EXPECT_EQ(param->replicas, 2);
  task.gpus = {0, 1, 2};
  auto gpus = TrainerLayoutOf(task);
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  EXPECT_EQ(gpus->replicas, 3);
}

// A run again's stored reports travel with its task (to an agent too): the last step and
// epoch, whether the metric was among them, and how many steps the last epoch had. A task from
// a coordinator that does not send the count (an earlier version) gets one step.
TEST(TrialTaskJsonTest, StoredReportsRoundTrip) {
  TrialTask task;
  task.number = 4;
  task.kind = TrialKind::kCommand;
  task.params = nlohmann::json::object();
  task.settings = nlohmann::json::object();
  task.stored_step = 8;
  task.stored_epoch = 3;
  task.stored_metric = true;
  task.stored_epoch_steps = 2;
  nlohmann::json j = ToJson(task);
  auto back = TrialTaskFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->stored_step, 8);
  EXPECT_EQ(back->stored_epoch, 3);
  EXPECT_TRUE(back->stored_metric);
  EXPECT_EQ(back->stored_epoch_steps, 2);
  j["stored"].erase("epoch_steps");
  EXPECT_EQ(TrialTaskFromJson(j)->stored_epoch_steps, 1);
  j["stored"]["epoch_steps"] = 9;  // more than the stored steps
  EXPECT_FALSE(TrialTaskFromJson(j).ok());
}

}  // namespace
}  // namespace sweep::executor
