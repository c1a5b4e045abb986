#include <chorus/core/crc32c.h>

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace chorus {
namespace internal {
std::uint32_t crc32c_software_for_testing(const void* data, std::size_t n, std::uint32_t crc);
}
namespace {

TEST(Crc32c, KnownAnswers) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
    dec[static_cast<std::size_t>(i)] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, HardwareAndTableAgreeAndExtendingWorks) {
  std::mt19937 rng(1);
  // Sizes through every path of the hardware version: bytes, words, three streams of 256-byte
  // blocks (from 768 bytes) and of 4096-byte blocks (from 12288), and the joins between them.
  std::vector<unsigned char> buf(40009);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (std::size_t n :
       {0u, 1u, 7u, 8u, 9u, 63u, 767u, 768u, 769u, 1000u, 4099u, 12287u, 12288u, 12289u, 13063u, 24576u, 40009u}) {
    EXPECT_EQ(crc32c(buf.data(), n), internal::crc32c_software_for_testing(buf.data(), n, 0)) << n;
    for (std::size_t cut : {std::size_t{0}, n / 3, n}) {
      const std::uint32_t a = crc32c(buf.data(), cut);
      EXPECT_EQ(crc32c(buf.data() + cut, n - cut, a), crc32c(buf.data(), n)) << n << " " << cut;
    }
  }
}

TEST(Crc32c, MaskRoundTripsAsTensorFlow) {
  for (std::uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(unmask_crc32c(mask_crc32c(c)), c);
  // TFRecord length header of an 8-byte length 0: the masked CRC TF writes (checked by the event
  // file tests against ../shared/testdata).
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
}

}  // namespace
}  // namespace chorus
