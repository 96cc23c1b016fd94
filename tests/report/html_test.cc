// Tests for the report page: self-contained, its data embedded safely.
#include "report/html.h"

#include <gtest/gtest.h>

#include "report_test_util.h"

namespace sweep::report {
namespace {

using nlohmann::json;

TEST(HtmlTest, ScriptSafeJsonCannotCloseTheScriptAndStillParses) {
  json v = {{"config", "name = \"</script><script>alert(1)</script>\" <!-- & \u2028"}};
  std::string text = ScriptSafeJson(v);
  EXPECT_EQ(text.find('<'), std::string::npos);
  EXPECT_EQ(text.find('>'), std::string::npos);
  EXPECT_EQ(text.find('&'), std::string::npos);
  EXPECT_EQ(text.find("\xE2\x80\xA8"), std::string::npos);
  EXPECT_EQ(json::parse(text), v);
}

TEST(HtmlTest, PageIsSelfContainedWithEveryChart) {
  SweepBuilder b("val_acc", true);
  b.Param(Linear("x", 0, 1));
  b.Trial({{"x", 0.2}}, store::TrialStatus::kCompleted, 0.5, {{1, 0.4}, {2, 0.5}});
  b.data().sweep.config_text = "[sweep]\nname = \"a</script>\"\n";
  std::string html = RenderHtml(b.data(), ReportOptions{});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* id : {"history", "parallel", "curves", "importance", "best", "config"}) {
    EXPECT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  }
  // Nothing is fetched: no external script, stylesheet, image or URL at all.
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  // The config's "</script>" cannot end the data block early: exactly our two scripts close.
  size_t closes = 0;
  for (size_t at = html.find("</script>"); at != std::string::npos;
       at = html.find("</script>", at + 1)) {
    ++closes;
  }
  EXPECT_EQ(closes, 2u);
  // The embedded data is the report's JSON.
  const std::string open = "<script id=\"sweep-data\" type=\"application/json\">";
  size_t begin = html.find(open) + open.size();
  size_t end = html.find("</script>", begin);
  EXPECT_EQ(json::parse(html.substr(begin, end - begin)), ReportJson(b.data(), ReportOptions{}));
}

}  // namespace
}  // namespace sweep::report
