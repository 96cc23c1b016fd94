// `sweep report`: one self-contained HTML page (inline CSS, our own JavaScript, the data as
// embedded JSON; nothing fetched from anywhere) that draws every chart of charts.h on <canvas>.
// Pure: the page is a function of the SweepData and options.
//
// Once drawn, the page sets on <body> data-charts="history:N parallel:N curves:N importance:N
// best:N config:N" (N: items drawn in each chart) and data-errors (the JavaScript errors and
// console.error messages it saw, "" when none), so a headless browser can check it.
#pragma once

#include <string>

#include "report/charts.h"
#include "report/sweep_data.h"

namespace sweep::report {

std::string RenderHtml(const SweepData& data, const ReportOptions& options);

// JSON text that is safe inside a <script> element: '<', '>' and '&' are written as \u003c,
// \u003e and \u0026 (they can only occur inside strings), and U+2028 / U+2029 as escapes.
std::string ScriptSafeJson(const nlohmann::json& value);

}  // namespace sweep::report
