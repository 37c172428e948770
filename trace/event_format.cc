#include "trace/event_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace distgrad::trace {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string process_line(int64_t pid, int rank, std::string_view name) {
  return absl::StrCat("{\"type\":\"process\",\"pid\":", pid, ",\"rank\":", rank, ",\"name\":", json_string(name), "}");
}

std::string thread_line(int tid, std::string_view name) {
  return absl::StrCat("{\"type\":\"thread\",\"tid\":", tid, ",\"name\":", json_string(name), "}");
}

std::string event_line(const Event& event, int tid) {
  std::string line =
      absl::StrCat("{\"ph\":\"", absl::string_view(&event.phase, 1), "\",\"cat\":", json_string(event.category),
                   ",\"name\":", json_string(event.name), ",\"tid\":", tid, ",\"ts\":", event.start_ns);
  if (event.phase == 'X') absl::StrAppend(&line, ",\"dur\":", event.duration_ns);
  if (event.flow != Flow::kNone) {
    absl::StrAppend(&line, ",\"bind_id\":", event.id,
                    event.flow == Flow::kIn ? ",\"flow_in\":true" : ",\"flow_out\":true");
  } else if (event.id != 0) {
    absl::StrAppend(&line, ",\"id\":", event.id);
  }
  if (!event.args.empty()) {
    line += ",\"args\":{";
    for (size_t i = 0; i < event.args.size(); ++i) {
      const auto& [key, value] = event.args[i];
      absl::StrAppend(&line, i == 0 ? "" : ",", json_string(key), ":");
      if (const int64_t* integer = std::get_if<int64_t>(&value)) {
        absl::StrAppend(&line, *integer);
      } else {
        const double number = std::get<double>(value);
        char digits[32];  // the shortest text that reads back as the same double
        const auto end = std::to_chars(digits, digits + sizeof(digits), std::isfinite(number) ? number : 0.0).ptr;
        line.append(digits, end);
      }
    }
    line += "}";
  }
  line += "}";
  return line;
}

std::string clock_line(int64_t offset_ns, int64_t error_ns, int64_t measured_at_ns) {
  return absl::StrCat("{\"type\":\"clock\",\"offset_ns\":", offset_ns, ",\"error_ns\":", error_ns,
                      ",\"at_ns\":", measured_at_ns, "}");
}

std::string dropped_line(uint64_t count) { return absl::StrCat("{\"type\":\"dropped\",\"count\":", count, "}"); }

}  // namespace distgrad::trace
