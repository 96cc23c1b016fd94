// The self-contained report page: a fixed skeleton, our CSS and JavaScript, the data as JSON.
#include "report/html.h"

#include <algorithm>

#include "page_assets.h"

namespace sweep::report {

using nlohmann::json;

namespace {

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string ScriptSafeJson(const json& value) {
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 64);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
               (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderHtml(const SweepData& data, const ReportOptions& options) {
  const json page = ReportJson(data, options);
  // Too few trials completed: both explaining charts use the trials at a rung, and say so.
  const std::string explained = page["explained"]["note"].get<std::string>();
  const std::string rung_note =
      explained.empty() ? "" : "<p class=\"note\"><b>" + HtmlEscape(explained) + ".</b></p>\n";
  const std::string mode = data.sweep.maximize ? "highest" : "lowest";
  const bool tpe = std::any_of(data.trials.begin(), data.trials.end(),
                               [](const store::TrialRecord& t) { return !t.proposed_by.empty(); });
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>sweep " + HtmlEscape(data.sweep.name) + "</title>\n<style>\n";
  html += kPageCss;
  html += "</style>\n</head>\n<body data-charts=\"\" data-errors=\"\">\n";
  html += "<h1 id=\"title\">sweep " + HtmlEscape(data.sweep.name) + "</h1>\n";
  html += "<div id=\"summary\"></div>\n";
  html += "<h2>Optimisation history</h2>\n<p class=\"note\">" + HtmlEscape(data.sweep.metric) +
          " of each trial by number (blue: completed, grey: pruned, at its last report); red: "
          "the best completed value so far (" +
          mode + ")." + (tpe ? " Hollow: TPE's startup trials, drawn at random." : "") +
          "</p>\n<canvas id=\"history\"></canvas>\n";
  html +=
      "<h2>Parallel coordinates</h2>\n<p class=\"note\">One line per completed trial through "
      "its parameter values, coloured by the metric (yellow: best, purple: worst). A line "
      "breaks where a conditional parameter is absent.</p>\n" +
      rung_note + "<canvas id=\"parallel\"></canvas>\n";
  html +=
      "<h2>Learning curves</h2>\n<p class=\"note\">The best completed trials over their "
      "reports; &times; marks the last report of each pruned trial; grey dashed curves are "
      "running or interrupted trials so far; vertical dashed lines are the early-stopping "
      "rungs.</p>\n<canvas id=\"curves\"></canvas>\n<div "
      "id=\"curves-legend\"></div>\n";
  html +=
      "<h2>Parameter importance</h2>\n<p class=\"note\">Share of the metric's variance over "
      "completed trials explained by each parameter's binned marginal means (first-order, "
      "corrected for chance; interactions not counted).</p>\n" +
      rung_note + "<canvas id=\"importance\"></canvas>\n";
  html += "<h2>Best trials</h2>\n<div id=\"best-wrap\"><table id=\"best\"></table></div>\n";
  html += "<h2>Config</h2>\n<pre id=\"config\"></pre>\n<div id=\"tip\"></div>\n";
  html += "<script id=\"sweep-data\" type=\"application/json\">";
  html += ScriptSafeJson(page);
  html += "</script>\n<script>\n";
  html += kPageJs;
  html += "</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace sweep::report
