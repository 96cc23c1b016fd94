// Command templates and report lines: see executor/command.h.
#include "executor/command.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace sweep::executor {

using nlohmann::json;

const std::vector<std::string>& CommandBuiltins() {
  static const std::vector<std::string> names = {"trial", "trial_dir", "seed", "gpus"};
  return names;
}

namespace {

std::string BuiltinMeaning(const std::string& name) {
  if (name == "trial") return "the trial's number";
  if (name == "trial_dir") return "the trial's directory";
  if (name == "seed") return "the trial's seed";
  return "the trial's GPUs";
}

// One piece of an argument: literal text, or the name of a value to put in.
struct Piece {
  bool placeholder = false;
  std::string text;
};

Result<std::vector<Piece>> Split(const std::string& arg, size_t index) {
  std::vector<Piece> pieces;
  std::string literal;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("argument " + std::to_string(index) + " (\"" + arg +
                                   "\"): " + why);
  };
  for (size_t i = 0; i < arg.size(); ++i) {
    char c = arg[i];
    if (c == '}') {
      if (i + 1 < arg.size() && arg[i + 1] == '}') {
        literal += '}';
        ++i;
        continue;
      }
      return bad("a lone '}'; write '}}' for a literal brace");
    }
    if (c != '{') {
      literal += c;
      continue;
    }
    if (i + 1 < arg.size() && arg[i + 1] == '{') {
      literal += '{';
      ++i;
      continue;
    }
    size_t close = arg.find('}', i + 1);
    if (close == std::string::npos) return bad("'{' without its '}'; write '{{' for a brace");
    std::string name = arg.substr(i + 1, close - i - 1);
    if (name.empty()) return bad("an empty placeholder {}");
    if (name.find('{') != std::string::npos) return bad("a '{' inside a placeholder");
    if (!literal.empty()) pieces.push_back({false, std::move(literal)});
    literal.clear();
    pieces.push_back({true, std::move(name)});
    i = close;
  }
  if (!literal.empty()) pieces.push_back({false, std::move(literal)});
  return pieces;
}

// Python's json module writes NaN, Infinity and -Infinity, which JSON does not have; outside
// strings they become a string no program writes (a control character, then the token), which
// ParseReportLine takes for a value that is not finite. null (Python's None) stays null: no
// value at all, not a diverged one.
constexpr char kNonFinite = '\x01';

std::string NonFiniteToMarker(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, token.size()) == token) {
        out += "\"\\u0001" + std::string(token) + "\"";
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      // A number past a double's range (1e400) is an infinity, as Python's float() reads it;
      // JSON parsers refuse it as an overflow, which would lose the whole line.
      size_t end = i + (c == '-' ? 1 : 0);
      if (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
        while (end < text.size() &&
               (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
          ++end;
        }
        const std::string token(text.substr(i, end - i));
        char* stop = nullptr;
        const double v = std::strtod(token.c_str(), &stop);
        if (stop == token.c_str() + token.size() && std::isinf(v)) {
          out += v < 0 ? "\"\\u0001-Infinity\"" : "\"\\u0001Infinity\"";
        } else {
          out += token;
        }
        i = end - 1;
        continue;
      }
      out += c;
    }
  }
  return out;
}

std::string Format(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.dump();  // numbers: shortest round trip; lists and tables: JSON
}

}  // namespace

Status CheckCommandTemplate(const std::vector<std::string>& argv,
                            const std::vector<std::string>& names) {
  if (argv.empty()) return Status::InvalidArgument("is empty; give the program and its arguments");
  if (argv[0].empty()) return Status::InvalidArgument("the program (argument 0) is empty");
  for (size_t i = 0; i < argv.size(); ++i) {
    SWEEP_ASSIGN_OR_RETURN(std::vector<Piece> pieces, Split(argv[i], i));
    for (const Piece& p : pieces) {
      if (!p.placeholder) continue;
      if (i == 0) {
        return Status::InvalidArgument("the program (argument 0) cannot hold a placeholder");
      }
      const auto& builtins = CommandBuiltins();
      const bool parameter = std::find(names.begin(), names.end(), p.text) != names.end();
      const bool builtin = std::find(builtins.begin(), builtins.end(), p.text) != builtins.end();
      if (parameter && builtin) {
        // Either reading would surprise someone: the program would get one value while the
        // store records the other.
        return Status::InvalidArgument("argument " + std::to_string(i) + " (\"" + argv[i] +
                                       "\"): {" + p.text +
                                       "} names both a parameter and a value every trial gets (" +
                                       BuiltinMeaning(p.text) + "); rename the parameter");
      }
      if (!parameter && !builtin) {
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        for (const std::string& n : builtins) list += (list.empty() ? "" : ", ") + n;
        return Status::InvalidArgument(
            "argument " + std::to_string(i) + " (\"" + argv[i] + "\"): {" + p.text +
            "} is neither a parameter nor a builtin (known: " + list + ")");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ExpandCommand(const std::vector<std::string>& argv,
                                               const json& values) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    SWEEP_ASSIGN_OR_RETURN(std::vector<Piece> pieces, Split(argv[i], i));
    std::string arg;
    bool absent = false;
    for (const Piece& p : pieces) {
      if (!p.placeholder) {
        arg += p.text;
        continue;
      }
      auto it = values.find(p.text);
      if (it == values.end() || it->is_null()) {
        absent = true;
        break;
      }
      arg += Format(*it);
    }
    if (!absent) out.push_back(std::move(arg));
  }
  return out;
}

namespace {

// kReportPrefix's word, without the space that may instead be a tab or nothing.
constexpr std::string_view kReportWord = kReportPrefix.substr(0, kReportPrefix.size() - 1);

// What a terminal shows of a line: the text after its last carriage return (a progress bar
// drawn over and over before it, as tqdm's on stdout), without the blanks that start it.
std::string_view Shown(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF (or CR CR LF)
  if (const size_t cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  return line;
}

}  // namespace

bool MentionsReport(std::string_view line) {
  for (size_t at = line.find(kReportWord); at != std::string_view::npos;
       at = line.find(kReportWord, at + 1)) {
    size_t i = at + kReportWord.size();
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i < line.size() && line[i] == '{') return true;
  }
  return false;
}

std::optional<Result<CommandReport>> ParseReportLine(std::string_view line) {
  line = Shown(line);
  // "sweep-report" then a space, a tab or the object itself ("sweep-report{...}" is a report
  // with a missing space, not a line of the program's own).
  const std::string_view word = kReportWord;
  if (line.substr(0, word.size()) != word || line.size() == word.size()) return std::nullopt;
  const char after = line[word.size()];
  if (after != ' ' && after != '\t' && after != '{') return std::nullopt;
  std::string_view body = line.substr(after == '{' ? word.size() : word.size() + 1);
  if (line.size() > kMaxReportBytes) {
    // The caller may have read only the start of a longer line.
    return Result<CommandReport>(Status::InvalidArgument(
        "it is longer than a report line may be (" + std::to_string(kMaxReportBytes) +
        " bytes): report fewer metrics per line"));
  }
  json j;
  std::string why;  // the parser's own words, when the text is not JSON
  try {
    j = json::parse(NonFiniteToMarker(body));
  } catch (const json::exception& e) {
    why = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ..." -> from "at"
    if (const size_t at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);
    why = Abbreviate(why, 300);  // it quotes the bad token, which may be the whole line
  }
  if (!j.is_object()) {
    return Result<CommandReport>(Status::InvalidArgument(
        "a sweep-report line needs a JSON object, e.g. sweep-report {\"epoch\": 1, "
        "\"val_acc\": 0.9}" +
        (why.empty() ? std::string() : " (" + why + ")")));
  }
  CommandReport r;
  r.metrics = json::object();
  for (auto& [key, v] : j.items()) {
    const bool finite_number = v.is_number() && std::isfinite(v.get<double>());
    const bool marker = v.is_string() && v.get_ref<const std::string&>().starts_with(kNonFinite);
    // What the program wrote, for messages.
    auto written = [&] {
      return marker ? v.get<std::string>().substr(1) : Abbreviate(v.dump(), 100);
    };
    if (key == "step") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return Result<CommandReport>(
            Status::InvalidArgument("\"step\" must be a non-negative integer, got " + written()));
      }
      r.step = v.get<int64_t>();
    } else if (key == "epoch") {
      if (!finite_number || v.get<double>() < 0) {
        return Result<CommandReport>(
            Status::InvalidArgument("\"epoch\" must be a non-negative number, got " + written()));
      }
      r.epoch = v.get<double>();
    } else if (key.empty() || key.size() > kMaxMetricNameBytes) {
      r.ignored.push_back(key.empty() ? "\"\" (an empty name)" : Abbreviate(key, 40));
    } else if (finite_number) {
      r.metrics[key] = v;
    } else if (marker || v.is_number()) {
      r.nonfinite.push_back(key);  // NaN or an infinity: the metric diverged
    } else {
      r.ignored.push_back(key);
    }
  }
  return Result<CommandReport>(std::move(r));
}

std::string Abbreviate(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size() - cut) +
         " bytes more)";
}

}  // namespace sweep::executor
