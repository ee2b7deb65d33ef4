// The backend interface's default methods (backend.h): host copies, no streams, a timeline
// read from the host clock.
#include <chrono>
#include <cstring>

#include "backends/backend.h"
#include "tensoracle/errors.h"

namespace tensoracle::backends {

void Backend::copy(void* dst, const void* src, std::size_t bytes, CopyKind, void*) const {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void Backend::check_stream(void* stream) const {
  if (stream != nullptr)
    throw InvalidArgument("[execution] the " + std::string(name() == "cpu" ? "CPU" : name()) + " backend takes no stream (pass none)");
}

namespace {

class HostTimeline final : public Backend::Timeline {
 public:
  HostTimeline(const Backend& backend, void* stream) : backend_(backend), stream_(stream) {
    backend_.synchronize(stream_);
    marks_.push_back(std::chrono::steady_clock::now());
  }
  void mark() override {
    backend_.synchronize(stream_);
    marks_.push_back(std::chrono::steady_clock::now());
  }
  std::vector<double> seconds() override {
    std::vector<double> s;
    for (std::size_t i = 1; i < marks_.size(); ++i) s.push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
    return s;
  }

 private:
  const Backend& backend_;
  void* stream_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<Backend::Timeline> Backend::timeline(void* stream) const {
  return std::make_unique<HostTimeline>(*this, stream);
}

}  // namespace tensoracle::backends
