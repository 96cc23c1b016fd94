// Line-oriented fd I/O for the worker protocol.
#include "line_io.h"

#include <unistd.h>
#include <cerrno>

namespace sweep::executor {

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool LineReader::ReadSome(int fd, std::vector<std::string>* lines) {
  char chunk[65536];
  ssize_t n;
  do {
    n = ::read(fd, chunk, sizeof chunk);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
  if (n == 0) return false;
  size_t start = buffer_.size();
  buffer_.append(chunk, static_cast<size_t>(n));
  size_t line_start = 0;
  for (size_t i = start; i < buffer_.size(); ++i) {
    if (buffer_[i] == '\n') {
      lines->emplace_back(buffer_, line_start, i - line_start);
      line_start = i + 1;
    }
  }
  buffer_.erase(0, line_start);
  return true;
}

}  // namespace sweep::executor
