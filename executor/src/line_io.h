// Line-oriented I/O on raw file descriptors, for the worker protocol.
// LineReader buffers partial lines; WriteAll retries short writes. Not thread-safe per object.
#pragma once

#include <string>
#include <vector>

namespace sweep::executor {

// Writes all of `data`; false on error (EPIPE when the peer is gone).
bool WriteAll(int fd, const std::string& data);

class LineReader {
 public:
  // Reads what is available (one read(2)); appends complete lines, without '\n', to `lines`.
  // Returns false at end of input or on error (other than EAGAIN/EINTR).
  bool ReadSome(int fd, std::vector<std::string>* lines);
  const std::string& partial() const { return buffer_; }

 private:
  std::string buffer_;
};

}  // namespace sweep::executor
