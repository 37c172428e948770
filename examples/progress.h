// A one-line progress bar for the examples: "meta-train [#####     ] 500/1000 loss 0.8123 12.3 it/s".
//
// On a terminal it redraws one line; otherwise (CI logs, pipes) it prints a line every tenth of
// the run, so logs stay short.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace examples {

class Progress {
 public:
  Progress(std::string label, int64_t total)
      : label_(std::move(label)),
        total_(total),
        interactive_(isatty(fileno(stdout)) != 0),
        start_(std::chrono::steady_clock::now()) {}

  // Reports `done` of `total` steps and the latest loss.
  void update(int64_t done, double loss) {
    const bool tenth = total_ < 10 || done % (total_ / 10) == 0 || done == total_;
    if (!interactive_ && !tenth) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total_, 1));
    std::printf("%s%s [%s%s] %lld/%lld loss %.4f %.1f it/s%s", interactive_ ? "\r" : "", label_.c_str(),
                std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
                static_cast<long long>(done), static_cast<long long>(total_), loss,
                seconds > 0 ? static_cast<double>(done) / seconds : 0.0, interactive_ ? "" : "\n");
    std::fflush(stdout);
  }

  void finish() {
    if (interactive_) std::printf("\n");
  }

 private:
  std::string label_;
  int64_t total_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace examples
