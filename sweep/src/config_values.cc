// The config's values below the tables (durations, sweep names, numbers, "did you mean", --set
// values) and the TOML helpers every table's parser uses.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <toml++/toml.h>

#include "config_parse.h"
#include "sweep/config.h"

namespace sweep {

using nlohmann::json;

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      }
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // What other tools (PyTorch, Keras, Optuna examples) call our trainer's keys: a word near one
  // of those names points to ours, where ours is a candidate.
  static const std::pair<std::string_view, std::string_view> kOtherNames[] = {
      {"learning_rate", "lr"},
      {"batch", "batch_size"},
      {"hidden_sizes", "hidden"},
      {"hidden_layers", "hidden"},
      {"layers", "hidden"},
      {"num_epochs", "epochs"},
      {"n_epochs", "epochs"},
      {"max_epochs", "epochs"},
      {"optim", "optimizer"},
      {"wd", "weight_decay"},
      {"warmup", "warmup_epochs"},
      {"act", "activation"},
      {"scheduler", "lr_schedule"},
      {"lr_scheduler", "lr_schedule"},
      {"dropout_rate", "dropout"},
      {"val_fraction", "validation_fraction"},
      // Optuna's words, for a config written by its users.
      {"low", "min"},
      {"high", "max"},
      {"choices", "values"},
      {"direction", "mode"},
      {"n_trials", "max_trials"},
      {"timeout", "time_budget"},
      {"int", "int_uniform"},
      {"float", "uniform"},
      {"sampler", "algorithm"},
      {"pruner", "early_stopping"},
      {"maximize", "max"},
      {"minimize", "min"},
  };
  for (const auto& [other, ours] : kOtherNames) {
    if (std::find(candidates.begin(), candidates.end(), ours) == candidates.end()) continue;
    const size_t d = distance(word, other);
    if (d < best_d && d <= other.size() / 4) {
      best_d = d;
      best = std::string(ours);
    }
  }
  return best;
}

Result<int64_t> ParseRetryFor(const std::string& text) {
  if (text == "forever") return int64_t{-1};
  const std::optional<double> seconds = ParseDuration(text);
  if (!seconds || *seconds > 366 * 86400.0) {
    return Status::InvalidArgument("--retry-for " + text +
                                   ": expected a duration such as 90s, 10m or 2h, or 'forever'");
  }
  return static_cast<int64_t>(*seconds * 1000);
}

std::string FormatDuration(double seconds) {
  if (!(seconds > 0)) return "0s";
  // Under 10 s, its fraction too (a budget of 0.5s); above, whole seconds.
  if (seconds < 10) return FormatNumber(std::round(seconds * 100) / 100) + "s";
  const int64_t total = std::llround(seconds);
  const int64_t d = total / 86400, h = total / 3600 % 24, m = total / 60 % 60, s = total % 60;
  std::string text;
  if (d > 0) text += std::to_string(d) + "d";
  if (h > 0) text += std::to_string(h) + "h";
  if (m > 0) text += std::to_string(m) + "m";
  if (s > 0 || text.empty()) text += std::to_string(s) + "s";
  return text;
}

std::optional<double> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    if (i == start) return std::nullopt;
    // The whole token is the number: "1.2.3" is not 1.2.
    const std::string token(text.substr(start, i - start));
    char* end = nullptr;
    const double number = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) return std::nullopt;
    double unit = 1;
    if (i < text.size()) {
      char u = text[i++];
      if (u == 'h') {
        unit = 3600;
      } else if (u == 'm') {
        unit = 60;
      } else if (u == 's') {
        unit = 1;
      } else if (u == 'd') {
        unit = 86400;
      } else {
        return std::nullopt;
      }
    } else if (any) {
      return std::nullopt;  // "1h30" is ambiguous
    }
    total += number * unit;
    any = true;
  }
  if (!std::isfinite(total)) return std::nullopt;
  return total;
}

bool IsValidSweepName(std::string_view name) {
  return !name.empty() && name.size() <= 128 && name != "." && name != ".." && name[0] != '-' &&
         std::all_of(name.begin(), name.end(), [](char ch) {
           return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                  ch == '.';
         });
}

std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

namespace config_internal {

json ToJson(const toml::node& node) {
  if (auto* t = node.as_table()) {
    json out = json::object();
    for (auto&& [k, v] : *t) out[std::string(k.str())] = ToJson(v);
    return out;
  }
  if (auto* a = node.as_array()) {
    json out = json::array();
    for (auto&& v : *a) out.push_back(ToJson(v));
    return out;
  }
  if (auto v = node.value_exact<int64_t>()) return *v;
  if (auto v = node.value_exact<double>()) return *v;
  if (auto v = node.value_exact<bool>()) return *v;
  if (auto v = node.value_exact<std::string>()) return *v;
  std::ostringstream os;
  node.visit([&](auto&& n) { os << n; });
  return os.str();
}

const toml::node* NonFinite(const toml::node& node) {
  if (auto v = node.value_exact<double>()) return std::isfinite(*v) ? nullptr : &node;
  if (auto* a = node.as_array()) {
    for (auto&& v : *a) {
      if (const toml::node* bad = NonFinite(v)) return bad;
    }
  }
  if (auto* t = node.as_table()) {
    for (auto&& [k, v] : *t) {
      if (const toml::node* bad = NonFinite(v)) return bad;
    }
  }
  return nullptr;
}

std::string TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date/time";
  }
}

bool AtLineEnd(std::string_view text, const toml::source_position& at) {
  size_t i = 0;
  for (toml::source_index line = 1; line < at.line && i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
  }
  i += at.column - 1;
  return i >= text.size() || text[i] == '\n' || text[i] == '\r';
}

std::string KeyBefore(std::string_view text, const toml::source_position& at) {
  size_t i = 0;
  for (toml::source_index line = 1; line < at.line && i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
  }
  const std::string_view line = text.substr(i, std::min<size_t>(at.column - 1, text.size() - i));
  const size_t eq = line.rfind('=');
  if (eq == std::string_view::npos) return "";
  std::string_view key = line.substr(0, eq);
  while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
  return std::string(key);
}

Status CheckNonAsciiPlacement(const Checker& c, std::string_view text) {
  if (text.starts_with("\xff\xfe") || text.starts_with("\xfe\xff")) {
    return c.Error(toml::source_region{{1, 1}, {1, 1}, nullptr}, "",
                   "the file is UTF-16; save it as UTF-8");
  }
  enum class In { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };
  In in = In::kCode;
  int line = 1, column = 1;
  auto advance = [&](size_t& i, size_t n) {  // skips n - 1 more ASCII bytes of a token
    i += n - 1;
    column += static_cast<int>(n - 1);
  };
  // A UTF-8 byte order mark (some editors write one) is not content; toml++ skips it too.
  const size_t first = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  for (size_t i = first; i < text.size(); ++i) {
    const char ch = text[i];
    auto starts = [&](std::string_view token) { return text.substr(i, token.size()) == token; };
    switch (in) {
      case In::kCode:
        if (ch == '#') {
          in = In::kComment;
        } else if (starts("\"\"\"")) {
          in = In::kMultiBasic;
          advance(i, 3);
        } else if (starts("'''")) {
          in = In::kMultiLiteral;
          advance(i, 3);
        } else if (ch == '"') {
          in = In::kBasic;
        } else if (ch == '\'') {
          in = In::kLiteral;
        } else if (static_cast<unsigned char>(ch) >= 0x80) {
          toml::source_region where;
          where.begin = {static_cast<toml::source_index>(line),
                         static_cast<toml::source_index>(column)};
          return c.Error(where, "",
                         "non-ASCII character outside a string (TOML allows it only in quoted "
                         "strings and comments; quote a key that needs it: \"clé\" = ...)");
        }
        break;
      case In::kComment:
        if (ch == '\n') in = In::kCode;
        break;
      case In::kBasic:
        if (ch == '\\') {
          advance(i, 2);
        } else if (ch == '"' || ch == '\n') {
          in = In::kCode;  // an unterminated string is the parser's to report
        }
        break;
      case In::kLiteral:
        if (ch == '\'' || ch == '\n') in = In::kCode;
        break;
      case In::kMultiBasic:
        if (ch == '\\') {
          // After a backslash toml++ 3.3 skips whitespace with a check that is undefined
          // behaviour on non-ASCII: refuse what would reach it (valid TOML only after a
          // line-ending backslash, and rare).
          size_t j = i + 1;
          while (j < text.size() &&
                 (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) {
            ++j;
          }
          if (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x80) {
            toml::source_region where;
            where.begin = {static_cast<toml::source_index>(line),
                           static_cast<toml::source_index>(column)};
            return c.Error(where, "",
                           "a non-ASCII character right after a backslash in a multi-line "
                           "string cannot be read; write it as \\uXXXX or move it before the "
                           "backslash");
          }
          advance(i, 2);
        } else if (starts("\"\"\"")) {
          in = In::kCode;
          advance(i, 3);
        }
        break;
      case In::kMultiLiteral:
        if (starts("'''")) {
          in = In::kCode;
          advance(i, 3);
        }
        break;
    }
    if (i < text.size() && text[i] == '\n') {
      ++line;
      column = 1;
    } else if (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;  // columns count characters, not UTF-8 continuation bytes
    }
  }
  return Status::Ok();
}

}  // namespace config_internal

json ParseSetValue(std::string_view text) {
  // `--set "lr_schedule= cosine"`: the spaces around a value are not part of it.
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  const std::string doc = "v = " + std::string(text);
  // Non-ASCII outside a string is not TOML (and toml++ 3.3 mishandles it): a bare word.
  if (!config_internal::CheckNonAsciiPlacement(config_internal::Checker("--set"), doc).ok())
    return std::string(text);
  try {
    toml::table t = toml::parse(doc);
    if (const toml::node* v = t.get("v")) return config_internal::ToJson(*v);
  } catch (const toml::parse_error&) {
  }
  // Numbers TOML does not write but a command line does: .5, 5., 1.e-3, and whole numbers
  // past int64 (a seed as printed: seeds span uint64).
  const std::string word(text);
  if (!word.empty() && word.size() <= 20 &&
      word.find_first_not_of("0123456789") == std::string::npos) {
    uint64_t big = 0;
    auto [at, ec] = std::from_chars(word.data(), word.data() + word.size(), big);
    if (ec == std::errc() && at == word.data() + word.size()) return big;
  }
  if (!word.empty() && word.find_first_not_of("0123456789+-.eE") == std::string::npos) {
    char* end = nullptr;
    const double v = std::strtod(word.c_str(), &end);
    if (end == word.c_str() + word.size() && std::isfinite(v)) return v;
  }
  return word;
}

}  // namespace sweep
