#include "common/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace ronde {
namespace {

// FIPS 180-2 appendix B and the usual companions.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(toHex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(toHex(sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(toHex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(toHex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Feeding bytes in odd pieces must give the same digest as one update, whatever the
// alignment against the 64-byte block and the 56-byte padding boundary.
TEST(Sha256, IncrementalMatchesOneShot) {
  for (size_t length : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 1000u}) {
    std::string data(length, '\0');
    for (size_t i = 0; i < length; ++i) data[i] = char(i * 7 + 3);
    Sha256 pieces;
    for (size_t offset = 0; offset < length; offset += 13) {
      pieces.update(std::string_view(data).substr(offset, 13));
    }
    EXPECT_EQ(pieces.finish(), sha256(data)) << "length " << length;
  }
}

// RFC 4231 test cases 1, 2, 3, 6 and 7 (6 and 7 use a key longer than a block).
TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(toHex(hmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(toHex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(toHex(hmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  const std::string long_key(131, '\xaa');
  EXPECT_EQ(toHex(hmacSha256(long_key, "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(toHex(hmacSha256(long_key,
                             "This is a test using a larger than block-size key and a larger "
                             "than block-size data. The key needs to be hashed before being "
                             "used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

}  // namespace
}  // namespace ronde
