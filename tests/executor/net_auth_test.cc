// Token files, nonces, HMAC proofs and the listen-address checks.
#include "executor/net_auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace sweep::executor::net {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sweep-token-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST_F(TokenFileTest, ReadsTheTokenWithoutTheNewline) {
  auto token = ReadTokenFile(Write("t", "s3cret-token\n", 0600));
  ASSERT_TRUE(token.ok()) << token.status().message();
  EXPECT_EQ(*token, "s3cret-token");
}

TEST_F(TokenFileTest, MissingFileIsNamed) {
  auto token = ReadTokenFile(dir_ + "/absent");
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), Status::Code::kNotFound);
  EXPECT_NE(token.status().message().find(dir_ + "/absent"), std::string::npos);
}

TEST_F(TokenFileTest, EmptyFileIsRefused) {
  auto token = ReadTokenFile(Write("t", " \n\n", 0600));
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("is empty"), std::string::npos);
}

TEST_F(TokenFileTest, FileOthersCanReadIsRefusedWithTheFix) {
  std::string path = Write("t", "s3cret", 0644);
  auto token = ReadTokenFile(path);
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("mode 0644"), std::string::npos)
      << token.status().message();
  EXPECT_NE(token.status().message().find("chmod 600 " + path), std::string::npos);
  EXPECT_FALSE(ReadTokenFile(Write("g", "s3cret", 0640)).ok());
  EXPECT_TRUE(ReadTokenFile(Write("o", "s3cret", 0400)).ok());
}

TEST(ProofTest, ProofsDependOnTokenNoncesAndDirection) {
  auto na = NewNonce();
  auto nh = NewNonce();
  ASSERT_TRUE(na.ok() && nh.ok());
  EXPECT_EQ(na->size(), 64u);
  EXPECT_NE(*na, *nh);
  const std::string p = AgentProof("tok", *na, *nh);
  EXPECT_EQ(p.size(), 64u);
  EXPECT_TRUE(ProofsEqual(p, AgentProof("tok", *na, *nh)));
  EXPECT_FALSE(ProofsEqual(p, AgentProof("tok2", *na, *nh)));
  EXPECT_FALSE(ProofsEqual(p, AgentProof("tok", *nh, *na)));
  // The coordinator's proof over the same nonces differs: an agent's proof cannot be
  // reflected back as the coordinator's.
  EXPECT_FALSE(ProofsEqual(p, CoordinatorProof("tok", *na, *nh)));
  EXPECT_FALSE(ProofsEqual(p, p.substr(1)));
  // And on what the handshake said: a hello changed on the path changes the proof.
  const std::string t = HandshakeDigest(R"({"slots":[1]})");
  EXPECT_FALSE(ProofsEqual(AgentProof("tok", *na, *nh, t), p));
  EXPECT_FALSE(ProofsEqual(AgentProof("tok", *na, *nh, t),
                           AgentProof("tok", *na, *nh, HandshakeDigest(R"({"slots":[1,2]})"))));
}

TEST(ProofTest, HmacMatchesAKnownVector) {
  // RFC 4231, test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(ListenTest, NonLoopbackNeedsAToken) {
  EXPECT_TRUE(ValidateListen("127.0.0.1", false).ok());
  EXPECT_TRUE(ValidateListen("localhost", false).ok());
  EXPECT_TRUE(ValidateListen("::1", false).ok());
  EXPECT_TRUE(ValidateListen("[::1]", false).ok());
  EXPECT_TRUE(ValidateListen("0.0.0.0", true).ok());
  Status st = ValidateListen("0.0.0.0", false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("0.0.0.0"), std::string::npos);
  EXPECT_NE(st.message().find("--token-file"), std::string::npos);
  EXPECT_FALSE(ValidateListen("127.evil.example", false).ok());
  EXPECT_FALSE(ValidateListen("10.0.0.5", false).ok());
  EXPECT_FALSE(ValidateListen("", true).ok());
}

TEST(ListenTest, ParsesHostAndPort) {
  auto a = ParseHostPort("10.0.0.5:7000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "10.0.0.5");
  EXPECT_EQ(a->second, 7000);
  auto b = ParseHostPort("[::1]:0");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(b->second, 0);
  for (const char* bad : {"host", "host:", ":80", "host:99999", "host:8x", "::1:80", "[::1]80"}) {
    auto r = ParseHostPort(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace sweep::executor::net
