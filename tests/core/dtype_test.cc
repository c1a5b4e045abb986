// Expected values come from the IEEE 754 encodings worked out by hand (noted beside each), or from
// reference decoders written here from the format definitions, never from chorus's own output.
#include <chorus/core/dtype.h>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include <chorus/core/error.h>

namespace chorus {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// binary16 from its definition: (-1)^s * (e == 0 ? frac * 2^-24 : (1024 + frac) * 2^(e - 25)).
float reference_half(std::uint16_t bits) {
  const int e = (bits >> 10) & 0x1F;
  const int frac = bits & 0x3FF;
  const float sign = (bits & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return frac == 0 ? sign * kInf : kNaN;
  if (e == 0) return sign * std::ldexp(static_cast<float>(frac), -24);
  return sign * std::ldexp(static_cast<float>(1024 + frac), e - 25);
}
bool half_is_nan(std::uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x03FF) != 0; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0; }
// bfloat16 is by definition the upper half of a float32.
float reference_bf16(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

template <typename Dst, typename Src>
Dst convert_one(Src v, DType src_type, DType dst_type) {
  Dst out{};
  convert(&v, src_type, &out, dst_type, 1);
  return out;
}
std::uint16_t double_to_half(double d) { return convert_one<std::uint16_t>(d, DType::kFloat64, DType::kFloat16); }
std::uint16_t double_to_bf16(double d) { return convert_one<std::uint16_t>(d, DType::kFloat64, DType::kBFloat16); }

// ---- names, sizes, categories ----

TEST(DTypeTest, SizesNamesAndCategories) {
  struct Row {
    DType d;
    std::size_t size;
    const char* name;
    bool floating;
    bool integer;
  };
  const Row rows[] = {
      {DType::kFloat32, 4, "float32", true, false},
      {DType::kFloat64, 8, "float64", true, false},
      {DType::kFloat16, 2, "float16", true, false},
      {DType::kBFloat16, 2, "bfloat16", true, false},
      {DType::kInt32, 4, "int32", false, true},
      {DType::kInt64, 8, "int64", false, true},
      {DType::kUInt8, 1, "uint8", false, true},
      {DType::kBool, 1, "bool", false, false},
      {DType::kString, sizeof(std::string), "string", false, false},
      {DType::kUInt16, 2, "uint16", false, true},
  };
  ASSERT_EQ(std::size(rows), static_cast<std::size_t>(kNumDTypes));
  for (const Row& r : rows) {
    EXPECT_EQ(dtype_size(r.d), r.size) << r.name;
    EXPECT_EQ(dtype_name(r.d), r.name);
    EXPECT_EQ(parse_dtype(r.name), r.d);
    EXPECT_EQ(is_floating(r.d), r.floating) << r.name;
    EXPECT_EQ(is_integer(r.d), r.integer) << r.name;
    std::ostringstream os;
    os << r.d;
    EXPECT_EQ(os.str(), r.name);
  }
}

TEST(DTypeTest, DtypeOfMatchesStorageTypes) {
  static_assert(dtype_of<float>() == DType::kFloat32);
  static_assert(dtype_of<double>() == DType::kFloat64);
  static_assert(dtype_of<float16>() == DType::kFloat16);
  static_assert(dtype_of<bfloat16>() == DType::kBFloat16);
  static_assert(dtype_of<std::int32_t>() == DType::kInt32);
  static_assert(dtype_of<std::int64_t>() == DType::kInt64);
  static_assert(dtype_of<std::uint8_t>() == DType::kUInt8);
  static_assert(dtype_of<std::uint16_t>() == DType::kUInt16);
  static_assert(dtype_of<bool>() == DType::kBool);
  static_assert(dtype_of<std::string>() == DType::kString);
  EXPECT_EQ(sizeof(float16), 2u);
  EXPECT_EQ(sizeof(bfloat16), 2u);
}

TEST(DTypeTest, ParseAcceptsAliasesInAnyCase) {
  EXPECT_EQ(parse_dtype("float"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("double"), DType::kFloat64);
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("FLOAT32"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("BFloat16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("Half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("DOUBLE"), DType::kFloat64);
  EXPECT_EQ(parse_dtype("Bool"), DType::kBool);
  EXPECT_EQ(parse_dtype("UINT8"), DType::kUInt8);
  EXPECT_EQ(parse_dtype("UInt16"), DType::kUInt16);
  EXPECT_EQ(parse_dtype("String"), DType::kString);
}

// The codes are stable (dataset cache files and iterator states store them): a new dtype goes
// after the last one.
TEST(DTypeTest, CodesAreStable) {
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 0);
  EXPECT_EQ(static_cast<int>(DType::kUInt8), 6);
  EXPECT_EQ(static_cast<int>(DType::kBool), 7);
  EXPECT_EQ(static_cast<int>(DType::kString), 8);
  EXPECT_EQ(static_cast<int>(DType::kUInt16), 9);
  EXPECT_EQ(kNumDTypes, 10);
}

TEST(DTypeTest, StringHasNoConversions) {
  const std::string s[2] = {"1", "2"};
  float f[2] = {};
  for (DType numeric : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    try {
      convert(s, DType::kString, f, numeric, 2);
      ADD_FAILURE() << "string -> " << numeric << " converted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot convert string to " + std::string(dtype_name(numeric))),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(convert(f, numeric, nullptr, DType::kString, 2), InvalidArgumentError);
  }
  // Not even string -> string: std::string objects are not bytes to memmove.
  std::string out[2];
  EXPECT_THROW(convert(s, DType::kString, out, DType::kString, 2), InvalidArgumentError);
  EXPECT_TRUE(out[0].empty());
  EXPECT_THROW(element_as_double(s, DType::kString, 0), InvalidArgumentError);
}

TEST(DTypeTest, ParseErrorQuotesTheNameAndListsValidOnes) {
  for (const char* bad : {"complex64", "", "float 32", "int8", "float32 ", "tf.float32"}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgumentError& e) {
      const std::string m = e.message();
      EXPECT_NE(m.find(std::string("'") + bad + "'"), std::string::npos) << m;
      for (const char* name :
           {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool", "float", "double", "half"})
        EXPECT_NE(m.find(name), std::string::npos) << m;
    }
  }
}

TEST(DTypeTest, InvalidEnumValuesThrowButPrintSafely) {
  const auto bad = static_cast<DType>(42);
  EXPECT_THROW(dtype_size(bad), InvalidArgumentError);
  EXPECT_THROW(dtype_name(bad), InvalidArgumentError);
  std::ostringstream os;
  os << bad;
  EXPECT_EQ(os.str(), "DType(42)");
  float f = 1.0f, g = 0.0f;
  EXPECT_THROW(convert(&f, DType::kFloat32, &g, bad, 1), InvalidArgumentError);
  EXPECT_THROW(convert(&f, bad, &g, DType::kFloat32, 1), InvalidArgumentError);
}

// ---- float16 ----

TEST(Float16Test, KnownEncodingsBothWays) {
  struct Row {
    float value;
    std::uint16_t bits;
  };
  const Row rows[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.5f, 0x3800},
      {1.5f, 0x3E00},
      {2.0f, 0x4000},
      {100.0f, 0x5640},  // 1.5625 * 2^6: exp 21, frac 576
      {65504.0f, 0x7BFF},
      {-65504.0f, 0xFBFF},        // largest finite: (2 - 2^-10) * 2^15
      {0x1p-14f, 0x0400},         // smallest normal
      {0x1p-24f, 0x0001},         // smallest subnormal
      {1023 * 0x1p-24f, 0x03FF},  // largest subnormal
      {0x1p-14f * (1 + 0x1p-10f), 0x0401},
      {kInf, 0x7C00},
      {-kInf, 0xFC00},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(float_to_float16(r.value), r.bits) << r.value;
    EXPECT_EQ(float_bits(float16_to_float(r.bits)), float_bits(r.value)) << std::hex << r.bits;
    EXPECT_EQ(float16(r.value).bits, r.bits);
    EXPECT_EQ(float_bits(static_cast<float>(float16::from_bits(r.bits))), float_bits(r.value));
  }
  // 1/3 = 1.0101..b * 2^-2: exponent field 13, fraction round(1024/3) = 341 = 0x155.
  EXPECT_EQ(float_to_float16(1.0f / 3.0f), 0x3555);
}

TEST(Float16Test, RoundsToNearestEven) {
  // Near 1 the float16 ulp is 2^-10, so 1 + 2^-11 is a tie.
  EXPECT_EQ(float_to_float16(1 + 0x1p-11f), 0x3C00);             // tie, 0x3C00 is even
  EXPECT_EQ(float_to_float16(1 + 3 * 0x1p-11f), 0x3C02);         // tie between 0x3C01 and 0x3C02
  EXPECT_EQ(float_to_float16(1 + 0x1p-11f + 0x1p-23f), 0x3C01);  // just above the tie
  EXPECT_EQ(float_to_float16(1 + 0x1p-11f - 0x1p-23f), 0x3C00);  // just below
  EXPECT_EQ(float_to_float16(1 - 0x1p-12f), 0x3C00);             // tie between 0x3BFF (odd) and 1.0
  EXPECT_EQ(float_to_float16(-(1 + 3 * 0x1p-11f)), 0xBC02);
  // 2049 lies halfway between 2048 (0x6800) and 2050 (0x6801): even wins.
  EXPECT_EQ(float_to_float16(2049.0f), 0x6800);
  EXPECT_EQ(float_to_float16(2051.0f), 0x6802);
}

TEST(Float16Test, OverflowGoesToInfinity) {
  EXPECT_EQ(float_to_float16(65519.0f), 0x7BFF);  // below the tie 65520 between 65504 and 2^16
  EXPECT_EQ(float_to_float16(65520.0f), 0x7C00);  // tie; 0x7BFF is odd so it rounds up to inf
  EXPECT_EQ(float_to_float16(-65520.0f), 0xFC00);
  EXPECT_EQ(float_to_float16(65536.0f), 0x7C00);
  EXPECT_EQ(float_to_float16(1e30f), 0x7C00);
  EXPECT_EQ(float_to_float16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(float_to_float16(-std::numeric_limits<float>::max()), 0xFC00);
}

TEST(Float16Test, SubnormalsRoundCorrectly) {
  EXPECT_EQ(float_to_float16(0x1p-25f), 0x0000);             // half the smallest: tie to 0
  EXPECT_EQ(float_to_float16(0x1p-25f + 0x1p-48f), 0x0001);  // just above it
  EXPECT_EQ(float_to_float16(-0x1p-25f), 0x8000);            // keeps the sign of zero
  EXPECT_EQ(float_to_float16(3 * 0x1p-25f), 0x0002);         // 1.5 units: tie, 2 is even
  EXPECT_EQ(float_to_float16(5 * 0x1p-25f), 0x0002);         // 2.5 units: tie, 2 is even
  EXPECT_EQ(float_to_float16(0x1p-26f), 0x0000);
  EXPECT_EQ(float_to_float16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_float16(1023.5f * 0x1p-24f), 0x0400);  // tie up into the smallest normal
  EXPECT_EQ(float_to_float16(1022.5f * 0x1p-24f), 0x03FE);  // tie, 0x3FE even
  EXPECT_EQ(float_to_float16(0x1p-14f - 0x1p-30f), 0x0400);
}

TEST(Float16Test, NaNStaysQuietNaN) {
  const std::uint16_t h = float_to_float16(kNaN);
  EXPECT_TRUE(half_is_nan(h));
  EXPECT_NE(h & 0x0200, 0) << "quiet bit";
  EXPECT_EQ(float_to_float16(float_from_bits(0x7FC00000u)), 0x7E00);
  EXPECT_EQ(float_to_float16(float_from_bits(0xFFC00000u)), 0xFE00);  // sign kept
  EXPECT_EQ(float_to_float16(float_from_bits(0x7F800001u)), 0x7E00);  // signalling, low payload
  EXPECT_EQ(float_to_float16(float_from_bits(0x7FFFFFFFu)), 0x7FFF);  // top payload bits kept
  // half -> float: payload moves up 13 bits and the float quiet bit is set.
  EXPECT_EQ(float_bits(float16_to_float(0x7C01)), 0x7FC02000u);
  EXPECT_EQ(float_bits(float16_to_float(0x7E00)), 0x7FC00000u);
  EXPECT_EQ(float_bits(float16_to_float(0xFE00)), 0xFFC00000u);
}

TEST(Float16Test, AllBitPatternsDecodeByDefinitionAndRoundTrip) {
  int nans = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = float16_to_float(b);
    if (half_is_nan(b)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(float_to_float16(f), b | 0x0200) << std::hex << b;  // same NaN, made quiet
      continue;
    }
    ASSERT_EQ(float_bits(f), float_bits(reference_half(b))) << std::hex << b;
    ASSERT_EQ(float_to_float16(f), b) << std::hex << b;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Float16Test, EveryMidpointRoundsToEvenAndItsNeighboursDoNot) {
  // For each pair of adjacent finite float16 values, the float halfway between them (exact: 12
  // significant bits) is a tie, and the floats just beside it must round to the nearer one.
  for (std::uint16_t h = 0; h < 0x7BFF; ++h) {
    const std::uint16_t next = h + 1;
    const float mid = (reference_half(h) + reference_half(next)) / 2;
    const std::uint16_t even = (h & 1) ? next : h;
    ASSERT_EQ(float_to_float16(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_float16(-mid), even | 0x8000) << std::hex << h;
    ASSERT_EQ(float_to_float16(std::nextafter(mid, kInf)), next) << std::hex << h;
    ASSERT_EQ(float_to_float16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
  }
}

// ---- bfloat16 ----

TEST(BFloat16Test, KnownEncodingsBothWays) {
  struct Row {
    float value;
    std::uint16_t bits;
  };
  const Row rows[] = {
      {0.0f, 0x0000},        {-0.0f, 0x8000}, {1.0f, 0x3F80},   {-2.0f, 0xC000},
      {0.5f, 0x3F00},        {3.0f, 0x4040},  {100.0f, 0x42C8},  // 1.5625 * 2^6: exp 133, fraction 0b1001000
      {0x1.fep127f, 0x7F7F},                                     // largest finite: (2 - 2^-7) * 2^127
      {0x1p-126f, 0x0080},                                       // smallest normal
      {0x1p-133f, 0x0001},                                       // smallest subnormal
      {kInf, 0x7F80},        {-kInf, 0xFF80},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(float_to_bfloat16(r.value), r.bits) << r.value;
    EXPECT_EQ(float_bits(bfloat16_to_float(r.bits)), float_bits(r.value)) << std::hex << r.bits;
    EXPECT_EQ(bfloat16(r.value).bits, r.bits);
    EXPECT_EQ(float_bits(static_cast<float>(bfloat16::from_bits(r.bits))), float_bits(r.value));
  }
}

TEST(BFloat16Test, RoundsToNearestEvenAndOverflows) {
  EXPECT_EQ(float_to_bfloat16(1 + 0x1p-8f), 0x3F80);             // tie, even
  EXPECT_EQ(float_to_bfloat16(1 + 3 * 0x1p-8f), 0x3F82);         // tie, up to even
  EXPECT_EQ(float_to_bfloat16(1 + 0x1p-8f + 0x1p-23f), 0x3F81);  // above the tie
  EXPECT_EQ(float_to_bfloat16(-(1 + 3 * 0x1p-8f)), 0xBF82);
  // The tie above the largest finite value is (2 - 2^-8) * 2^127; 0x7F7F is odd so it goes to inf.
  EXPECT_EQ(float_to_bfloat16(0x1.ffp127f), 0x7F80);
  EXPECT_EQ(float_to_bfloat16(std::nextafter(0x1.ffp127f, 0.0f)), 0x7F7F);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(float_to_bfloat16(0x1p-134f), 0x0000);              // half the smallest subnormal: tie to 0
  EXPECT_EQ(float_to_bfloat16(3 * 0x1p-134f), 0x0002);          // tie, 2 is even
  EXPECT_EQ(float_to_bfloat16(0x1p-126f - 0x1p-149f), 0x0080);  // largest float subnormal rounds up
}

TEST(BFloat16Test, NaNStaysQuietNaN) {
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x7FC00000u)), 0x7FC0);
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x7F800001u)), 0x7FC0);  // would truncate to inf
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x7FA00000u)), 0x7FE0);  // payload kept, quiet bit set
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x7FFFFFFFu)), 0x7FFF);  // rounding would carry out
  EXPECT_EQ(float_bits(bfloat16_to_float(0x7F81)), 0x7FC10000u);
  EXPECT_EQ(float_bits(bfloat16_to_float(0x7FC0)), 0x7FC00000u);
}

TEST(BFloat16Test, AllBitPatternsDecodeByDefinitionAndRoundTrip) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = bfloat16_to_float(b);
    if (bf16_is_nan(b)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(float_to_bfloat16(f), b | 0x0040) << std::hex << b;
      continue;
    }
    ASSERT_EQ(float_bits(f), float_bits(reference_bf16(b))) << std::hex << b;
    ASSERT_EQ(float_to_bfloat16(f), b) << std::hex << b;
  }
}

TEST(BFloat16Test, EveryMidpointRoundsToEvenAndItsNeighboursDoNot) {
  for (std::uint16_t h = 0; h < 0x7F7F; ++h) {
    const std::uint16_t next = h + 1;
    // lo + (hi - lo) / 2 is exact (9 significant bits) and, unlike (lo + hi) / 2, cannot overflow.
    const float lo = reference_bf16(h);
    const float mid = lo + (reference_bf16(next) - lo) / 2;
    const std::uint16_t even = (h & 1) ? next : h;
    ASSERT_EQ(float_to_bfloat16(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_bfloat16(-mid), even | 0x8000) << std::hex << h;
    ASSERT_EQ(float_to_bfloat16(std::nextafter(mid, kInf)), next) << std::hex << h;
    ASSERT_EQ(float_to_bfloat16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
  }
}

// ---- convert: narrow floats from double and integers ----

TEST(ConvertTest, DoubleToNarrowRoundsOnceNotTwice) {
  // In float, 1 + 2^-11 + 2^-40 rounds to the tie 1 + 2^-11, so rounding via float would give
  // 1.0; the exact value is above the tie.
  EXPECT_EQ(double_to_half(1 + 0x1p-11 + 0x1p-40), 0x3C01);
  EXPECT_EQ(double_to_half(1 + 0x1p-11), 0x3C00);
  EXPECT_EQ(double_to_bf16(1 + 0x1p-8 + 0x1p-40), 0x3F81);
  EXPECT_EQ(double_to_bf16(1 + 0x1p-8), 0x3F80);
  EXPECT_EQ(double_to_half(0x1p-25 + 0x1p-70), 0x0001);  // subnormal: above the tie at 2^-25
  EXPECT_EQ(double_to_bf16(0x1p-134 + 0x1p-170), 0x0001);
  EXPECT_EQ(double_to_bf16(0x1p-134), 0x0000);
  EXPECT_EQ(double_to_half(65504.0), 0x7BFF);
  EXPECT_EQ(double_to_half(65520.0), 0x7C00);
  EXPECT_EQ(double_to_half(1e300), 0x7C00);
  EXPECT_EQ(double_to_bf16(-1e300), 0xFF80);
  EXPECT_EQ(double_to_bf16(0x1.ffp127), 0x7F80);
  EXPECT_EQ(double_to_half(1e-300), 0x0000);
  EXPECT_EQ(double_to_half(-1e-300), 0x8000);
  EXPECT_EQ(double_to_half(std::numeric_limits<double>::denorm_min()), 0x0000);
  EXPECT_EQ(double_to_half(std::numeric_limits<double>::infinity()), 0x7C00);
  EXPECT_TRUE(half_is_nan(double_to_half(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(bf16_is_nan(double_to_bf16(-std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(double_to_bf16(-std::numeric_limits<double>::quiet_NaN()) & 0x8000, 0x8000);
}

TEST(ConvertTest, DoubleAndFloatPathsAgreeOnFloats) {
  // Every float is a double, so both paths must give the same bits. Midpoints and their
  // neighbours are the cases where a rounding mistake would show.
  std::vector<float> samples;
  for (std::uint16_t h = 0; h < 0x7BFF; h += 7) {
    const float mid = (reference_half(h) + reference_half(h + 1)) / 2;
    samples.insert(samples.end(), {mid, std::nextafter(mid, kInf), std::nextafter(mid, 0.0f), -mid});
  }
  std::uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1664525u + 1013904223u;  // LCG over all bit patterns
    const float f = float_from_bits(x);
    if (!std::isnan(f)) samples.push_back(f);
  }
  for (float f : samples) {
    ASSERT_EQ(double_to_half(f), float_to_float16(f)) << std::hexfloat << f;
    ASSERT_EQ(double_to_bf16(f), float_to_bfloat16(f)) << std::hexfloat << f;
  }
}

TEST(ConvertTest, IntegersToNarrowFloatsRoundExactly) {
  auto i64_to_bf16 = [](std::int64_t v) { return convert_one<std::uint16_t>(v, DType::kInt64, DType::kBFloat16); };
  auto i32_to_half = [](std::int32_t v) { return convert_one<std::uint16_t>(v, DType::kInt32, DType::kFloat16); };
  // 2^60 is exponent 187 = 0xBB -> 0x5D80; its bfloat16 ulp is 2^53, so 2^60 + 2^52 is a tie. Via
  // double, 2^60 + 2^52 + 1 would first round onto that tie and then down.
  EXPECT_EQ(i64_to_bf16((std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1), 0x5D81);
  EXPECT_EQ(i64_to_bf16((std::int64_t{1} << 60) + (std::int64_t{1} << 52)), 0x5D80);
  EXPECT_EQ(i64_to_bf16(std::numeric_limits<std::int64_t>::min()), 0xDF00);  // -2^63: exponent 190
  EXPECT_EQ(convert_one<std::uint16_t>(std::numeric_limits<std::int64_t>::min(), DType::kInt64, DType::kFloat16),
            0xFC00);
  EXPECT_EQ(i32_to_half(65504), 0x7BFF);
  EXPECT_EQ(i32_to_half(65520), 0x7C00);
  EXPECT_EQ(i32_to_half(-65519), 0xFBFF);
  EXPECT_EQ(i32_to_half(2049), 0x6800);  // tie between 2048 and 2050
  EXPECT_EQ(i32_to_half(2051), 0x6802);  // tie between 2050 and 2052
  EXPECT_EQ(i32_to_half(0), 0x0000);
  EXPECT_EQ(i32_to_half(std::numeric_limits<std::int32_t>::min()), 0xFC00);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint8_t{255}, DType::kUInt8, DType::kFloat16), 0x5BF8);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint8_t{255}, DType::kUInt8, DType::kBFloat16), 0x437F);
  EXPECT_EQ(convert_one<std::uint16_t>(std::int32_t{257}, DType::kInt32, DType::kBFloat16), 0x4380);
  EXPECT_EQ(convert_one<std::uint16_t>(std::int32_t{259}, DType::kInt32, DType::kBFloat16), 0x4382);
}

TEST(ConvertTest, WideFloatConversions) {
  auto d2f = [](double d) { return convert_one<float>(d, DType::kFloat64, DType::kFloat32); };
  EXPECT_EQ(d2f(1e300), kInf);
  EXPECT_EQ(d2f(-1e300), -kInf);
  EXPECT_EQ(d2f(0x1.ffffffp127), kInf);  // tie above FLT_MAX: to inf
  EXPECT_EQ(d2f(0x1.fffffefffffffp127), std::numeric_limits<float>::max());
  EXPECT_EQ(d2f(1 + 0x1p-24), 1.0f);              // tie, even
  EXPECT_EQ(d2f(1 + 3 * 0x1p-24), 1 + 0x1p-22f);  // tie, up to even
  EXPECT_EQ(d2f(1e-50), 0.0f);
  EXPECT_TRUE(std::isnan(d2f(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(convert_one<float>(std::int64_t{(1 << 24) + 1}, DType::kInt64, DType::kFloat32), 0x1p24f);
  EXPECT_EQ(convert_one<float>(std::numeric_limits<std::int64_t>::max(), DType::kInt64, DType::kFloat32), 0x1p63f);
  EXPECT_EQ(convert_one<double>((std::int64_t{1} << 53) + 1, DType::kInt64, DType::kFloat64), 0x1p53);
  EXPECT_EQ(convert_one<double>(std::uint16_t{0x7BFF}, DType::kFloat16, DType::kFloat64), 65504.0);
  EXPECT_EQ(convert_one<double>(std::uint16_t{0x0001}, DType::kBFloat16, DType::kFloat64), 0x1p-133);
  // float16 <-> bfloat16 goes through float exactly, then rounds once.
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint16_t{0x7BFF}, DType::kFloat16, DType::kBFloat16),
            0x4780);  // 65504 -> 65536
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint16_t{0x3F81}, DType::kBFloat16, DType::kFloat16),
            0x3C08);  // 1+2^-7 exact
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint16_t{0x4780}, DType::kBFloat16, DType::kFloat16),
            0x7C00);  // 65536 -> inf
}

// ---- convert: to integers and bool ----

TEST(ConvertTest, FloatToIntegerTruncatesAndSaturates) {
  auto f2i32 = [](float f) { return convert_one<std::int32_t>(f, DType::kFloat32, DType::kInt32); };
  auto d2i32 = [](double d) { return convert_one<std::int32_t>(d, DType::kFloat64, DType::kInt32); };
  auto d2i64 = [](double d) { return convert_one<std::int64_t>(d, DType::kFloat64, DType::kInt64); };
  auto d2u8 = [](double d) { return convert_one<std::uint8_t>(d, DType::kFloat64, DType::kUInt8); };
  constexpr auto i32min = std::numeric_limits<std::int32_t>::min();
  constexpr auto i32max = std::numeric_limits<std::int32_t>::max();
  constexpr auto i64min = std::numeric_limits<std::int64_t>::min();
  constexpr auto i64max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(f2i32(2.9f), 2);
  EXPECT_EQ(f2i32(-2.9f), -2);
  EXPECT_EQ(f2i32(kNaN), 0);
  EXPECT_EQ(f2i32(kInf), i32max);
  EXPECT_EQ(f2i32(-kInf), i32min);
  EXPECT_EQ(f2i32(1e10f), i32max);
  EXPECT_EQ(f2i32(-1e10f), i32min);
  EXPECT_EQ(f2i32(0x1p31f), i32max);            // 2^31 is one past the max
  EXPECT_EQ(f2i32(0x1p31f - 128), 2147483520);  // largest float below 2^31
  EXPECT_EQ(f2i32(-0x1p31f), i32min);           // exactly the min
  EXPECT_EQ(d2i32(2147483647.9), i32max);       // truncates into range
  EXPECT_EQ(d2i32(-2147483648.9), i32min);
  EXPECT_EQ(d2i32(-2147483649.0), i32min);  // saturates
  EXPECT_EQ(d2i64(0x1p63), i64max);
  EXPECT_EQ(d2i64(-0x1p63), i64min);
  EXPECT_EQ(d2i64(0x1.fffffffffffffp62), 9223372036854774784);  // 2^63 - 2^10
  EXPECT_EQ(d2i64(1e19), i64max);
  EXPECT_EQ(d2i64(-1e19), i64min);
  EXPECT_EQ(d2i64(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(convert_one<std::int64_t>(9.3e18f, DType::kFloat32, DType::kInt64), i64max);
  EXPECT_EQ(d2u8(255.9), 255);
  EXPECT_EQ(d2u8(256.0), 255);
  EXPECT_EQ(d2u8(300.7), 255);
  EXPECT_EQ(d2u8(0.99), 0);
  EXPECT_EQ(d2u8(-0.5), 0);
  EXPECT_EQ(d2u8(-1.0), 0);
  EXPECT_EQ(d2u8(-100.0), 0);
  EXPECT_EQ(d2u8(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(convert_one<std::uint8_t>(std::uint16_t{0x7C00}, DType::kFloat16, DType::kUInt8), 255);
  auto d2u16 = [](double d) { return convert_one<std::uint16_t>(d, DType::kFloat64, DType::kUInt16); };
  EXPECT_EQ(d2u16(65535.9), 65535);
  EXPECT_EQ(d2u16(1e9), 65535);
  EXPECT_EQ(d2u16(-3.0), 0);
  EXPECT_EQ(d2u16(1234.99), 1234);
  EXPECT_EQ(d2u16(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint16_t{0x7BFF}, DType::kFloat16, DType::kUInt16), 65504);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint16_t{65535}, DType::kUInt16, DType::kFloat16),
            0x7C00);  // rounds to inf
  EXPECT_EQ(convert_one<std::uint8_t>(std::uint16_t{0xFF80}, DType::kBFloat16, DType::kUInt8), 0);
  EXPECT_EQ(convert_one<std::int32_t>(std::uint16_t{0x7BFF}, DType::kFloat16, DType::kInt32), 65504);
  EXPECT_EQ(convert_one<std::int32_t>(std::uint16_t{0x7E00}, DType::kFloat16, DType::kInt32), 0);  // NaN
  EXPECT_EQ(convert_one<std::int64_t>(std::uint16_t{0x7F80}, DType::kBFloat16, DType::kInt64), i64max);
}

TEST(ConvertTest, IntegerToIntegerWrapsLikeStaticCast) {
  EXPECT_EQ(convert_one<std::uint8_t>(std::int32_t{300}, DType::kInt32, DType::kUInt8), 44);  // 300 - 256
  EXPECT_EQ(convert_one<std::uint8_t>(std::int32_t{-1}, DType::kInt32, DType::kUInt8), 255);
  EXPECT_EQ(convert_one<std::int32_t>((std::int64_t{1} << 32) + 5, DType::kInt64, DType::kInt32), 5);
  EXPECT_EQ(convert_one<std::int32_t>(std::int64_t{1} << 31, DType::kInt64, DType::kInt32),
            std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(convert_one<std::int32_t>(std::int64_t{-1}, DType::kInt64, DType::kInt32), -1);
  EXPECT_EQ(convert_one<std::int64_t>(std::uint8_t{200}, DType::kUInt8, DType::kInt64), 200);
  EXPECT_EQ(convert_one<std::int64_t>(std::int32_t{-7}, DType::kInt32, DType::kInt64), -7);
  // uint16 (tf.cast int32 → uint16 wraps as numpy's astype does).
  EXPECT_EQ(convert_one<std::uint16_t>(std::int32_t{70000}, DType::kInt32, DType::kUInt16), 4464);  // 70000 - 65536
  EXPECT_EQ(convert_one<std::uint16_t>(std::int32_t{-1}, DType::kInt32, DType::kUInt16), 65535);
  EXPECT_EQ(convert_one<std::uint8_t>(std::uint16_t{0x1234}, DType::kUInt16, DType::kUInt8), 0x34);
  EXPECT_EQ(convert_one<std::int32_t>(std::uint16_t{65535}, DType::kUInt16, DType::kInt32), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint8_t{255}, DType::kUInt8, DType::kUInt16), 255);
}

TEST(ConvertTest, BoolIsNonzeroAndNaNIsTrue) {
  auto to_bool = [](auto v, DType t) { return convert_one<std::uint8_t>(v, t, DType::kBool); };
  EXPECT_EQ(to_bool(kNaN, DType::kFloat32), 1);
  EXPECT_EQ(to_bool(std::numeric_limits<double>::quiet_NaN(), DType::kFloat64), 1);
  EXPECT_EQ(to_bool(-0.0f, DType::kFloat32), 0);
  EXPECT_EQ(to_bool(0.5, DType::kFloat64), 1);
  EXPECT_EQ(to_bool(1e-300, DType::kFloat64), 1);
  EXPECT_EQ(to_bool(std::int32_t{256}, DType::kInt32), 1);  // uint8 would wrap to 0; bool does not
  EXPECT_EQ(to_bool(std::numeric_limits<std::int64_t>::min(), DType::kInt64), 1);
  EXPECT_EQ(to_bool(std::uint16_t{0x8000}, DType::kFloat16), 0);   // -0
  EXPECT_EQ(to_bool(std::uint16_t{0x0001}, DType::kFloat16), 1);   // smallest subnormal
  EXPECT_EQ(to_bool(std::uint16_t{0x7FC0}, DType::kBFloat16), 1);  // NaN
  // Bool bytes other than 0/1 read as true and come out as 1.
  const std::uint8_t bytes[3] = {0, 1, 2};
  float f[3];
  convert(bytes, DType::kBool, f, DType::kFloat32, 3);
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[1], 1.0f);
  EXPECT_EQ(f[2], 1.0f);
  std::uint16_t h[3];
  convert(bytes, DType::kBool, h, DType::kFloat16, 3);
  EXPECT_EQ(h[0], 0x0000);
  EXPECT_EQ(h[2], 0x3C00);
  std::uint8_t u[3];
  convert(bytes, DType::kBool, u, DType::kUInt8, 3);
  EXPECT_EQ(u[2], 1);
  EXPECT_EQ(element_as_double(bytes, DType::kBool, 2), 1.0);
}

// ---- convert: every pair ----

// The bytes of `values` stored as `dtype`, written from the encodings (not through convert).
std::vector<unsigned char> encode(DType dtype, const std::vector<double>& values) {
  std::vector<unsigned char> out(values.size() * dtype_size(dtype));
  auto put = [&](std::size_t i, auto v) { std::memcpy(out.data() + i * sizeof v, &v, sizeof v); };
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    switch (dtype) {
      case DType::kFloat32: put(i, static_cast<float>(v)); break;
      case DType::kFloat64: put(i, v); break;
      case DType::kInt32: put(i, static_cast<std::int32_t>(v)); break;
      case DType::kInt64: put(i, static_cast<std::int64_t>(v)); break;
      case DType::kUInt8: put(i, static_cast<std::uint8_t>(v)); break;
      case DType::kUInt16: put(i, static_cast<std::uint16_t>(v)); break;
      case DType::kBool: put(i, static_cast<std::uint8_t>(v != 0)); break;
      case DType::kString: ADD_FAILURE() << "string has no numeric encoding"; break;
      case DType::kFloat16:
      case DType::kBFloat16: {
        // 0, 1, 3, 100 and -2.5 worked out by hand; see KnownEncodingsBothWays.
        const bool h = dtype == DType::kFloat16;
        std::uint16_t b = 0;
        if (v == 1)
          b = h ? 0x3C00 : 0x3F80;
        else if (v == 3)
          b = h ? 0x4200 : 0x4040;
        else if (v == 100)
          b = h ? 0x5640 : 0x42C8;
        else if (v == -2.5)
          b = h ? 0xC100 : 0xC020;
        else if (v != 0)
          ADD_FAILURE() << "no encoding for " << v;
        put(i, b);
        break;
      }
    }
  }
  return out;
}

// The numeric dtypes: every one but string (StringHasNoConversions).
std::vector<DType> numeric_dtypes() {
  std::vector<DType> out;
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<DType>(i) != DType::kString) out.push_back(static_cast<DType>(i));
  return out;
}

TEST(ConvertTest, AllPairsConvertExactValues) {
  const std::vector<double> values = {0, 1, 3, 100};
  for (const DType src_type : numeric_dtypes()) {
    const auto src = encode(src_type, values);
    for (const DType dst_type : numeric_dtypes()) {
      std::vector<unsigned char> dst(values.size() * dtype_size(dst_type), 0xAB);
      convert(src.data(), src_type, dst.data(), dst_type, values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        // Through bool, any nonzero value becomes 1.
        const bool via_bool = src_type == DType::kBool || dst_type == DType::kBool;
        const double want = via_bool ? (values[i] != 0) : values[i];
        EXPECT_EQ(element_as_double(dst.data(), dst_type, i), want)
            << src_type << " -> " << dst_type << " element " << i;
      }
      if (src_type != DType::kBool && dst_type != DType::kBool) {
        EXPECT_EQ(dst, encode(dst_type, values)) << src_type << " -> " << dst_type;
      }
    }
  }
}

TEST(ConvertTest, AllPairsFromANegativeFraction) {
  // -2.5 in every floating source: floats keep it, int32/int64 truncate to -2, uint8 and uint16
  // saturate to 0, bool gets true.
  for (DType src_type : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const auto src = encode(src_type, {-2.5});
    for (const DType dst_type : numeric_dtypes()) {
      std::vector<unsigned char> dst(dtype_size(dst_type));
      convert(src.data(), src_type, dst.data(), dst_type, 1);
      double want = -2.5;
      if (dst_type == DType::kInt32 || dst_type == DType::kInt64) want = -2;
      if (dst_type == DType::kUInt8 || dst_type == DType::kUInt16) want = 0;
      if (dst_type == DType::kBool) want = 1;
      EXPECT_EQ(element_as_double(dst.data(), dst_type, 0), want) << src_type << " -> " << dst_type;
    }
  }
}

TEST(ConvertTest, SameTypeIsABitwiseCopyAndInPlaceIsANoOp) {
  const std::uint16_t nan_payload[2] = {0x7C01, 0xFD55};  // signalling NaNs stay untouched
  std::uint16_t out[2] = {};
  convert(nan_payload, DType::kFloat16, out, DType::kFloat16, 2);
  EXPECT_EQ(out[0], 0x7C01);
  EXPECT_EQ(out[1], 0xFD55);
  float in_place[3] = {1.0f, kNaN, -3.0f};
  convert(in_place, DType::kFloat32, in_place, DType::kFloat32, 3);
  EXPECT_EQ(in_place[0], 1.0f);
  EXPECT_EQ(in_place[2], -3.0f);
  convert(nullptr, DType::kFloat32, nullptr, DType::kInt64, 0);  // nothing to do
  convert(nullptr, DType::kInt32, nullptr, DType::kInt32, 0);
}

TEST(ConvertTest, UnalignedBuffersAndElementAsDouble) {
  // A byte offset of 1 misaligns every element; loads and stores must not assume alignment.
  alignas(8) unsigned char buf[1 + 4 * sizeof(double)] = {};
  const double values[4] = {1.5, -2.0, 65504.0, 0.0};
  std::memcpy(buf + 1, values, sizeof values);
  EXPECT_EQ(element_as_double(buf + 1, DType::kFloat64, 2), 65504.0);
  alignas(8) unsigned char halves[1 + 4 * 2] = {};
  convert(buf + 1, DType::kFloat64, halves + 1, DType::kFloat16, 4);
  EXPECT_EQ(element_as_double(halves + 1, DType::kFloat16, 0), 1.5);
  EXPECT_EQ(element_as_double(halves + 1, DType::kFloat16, 1), -2.0);
  EXPECT_EQ(element_as_double(halves + 1, DType::kFloat16, 2), 65504.0);
  const std::int64_t big[2] = {7, std::numeric_limits<std::int64_t>::min()};
  EXPECT_EQ(element_as_double(big, DType::kInt64, 1), -0x1p63);
  const std::uint16_t bf[2] = {0x3F80, 0xC000};
  EXPECT_EQ(element_as_double(bf, DType::kBFloat16, 1), -2.0);
}

}  // namespace
}  // namespace chorus
