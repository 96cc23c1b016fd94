// I/O on raw file descriptors, for the worker protocol and command trials.
// Fd owns one; LineReader buffers partial lines; WriteAll retries short writes. Not
// thread-safe per object.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

namespace sweep::executor {

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

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
