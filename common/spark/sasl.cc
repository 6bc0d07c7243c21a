#include "common/spark/sasl.h"

#include <endian.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <string.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/openssl.h"
#include "common/status_macros.h"

namespace ferry::spark {

namespace {

// Spark's names (SparkSaslServer, SecurityManager): a SASL peer made with no protocol
// and the realm as its server name, so the digest-uri is "null/default".
constexpr char kRealm[] = "default";
constexpr char kDigestUri[] = "null/default";
constexpr char kUser[] = "sparkSaslUser";
constexpr char kCipher[] = "3des";
// RFC 2831's bounds on a challenge (2.1.1) and a response (2.1.2), and on the directives
// either may hold; tokens over them are refused unparsed.
constexpr size_t kMaxChallengeBytes = 2048;
constexpr size_t kMaxResponseBytes = 4096;
constexpr size_t kMaxDirectives = 32;
// The maxbuf a peer may announce: RFC 2831's upper bound, and a lower one of ours so that
// a peer cannot make Seal wrap a few bytes at a time.
constexpr uint64_t kMaxMaxbuf = 16777215;
constexpr uint64_t kMinMaxbuf = 1024;
constexpr uint64_t kDefaultMaxbuf = 65536;  // a peer that announces none
// A wrapped message adds at most 8 bytes of padding, a 10-byte MAC, the 2-byte message
// type and the 4-byte sequence number to what it carries.
constexpr size_t kWrapOverhead = 8 + 10 + 2 + 4;
constexpr size_t kMacBytes = 10;
constexpr size_t kBlockBytes = 8;
constexpr size_t kMaxPiece = size_t{64} << 10;  // Spark's maxEncryptedBlockSize
constexpr size_t kRecordLengthBytes = 8;
// RFC 2831 2.3's constants for the integrity (Ki) and sealing (Kc) keys.
constexpr char kClientSigning[] =
    "Digest session key to client-to-server signing key magic constant";
constexpr char kServerSigning[] =
    "Digest session key to server-to-client signing key magic constant";
constexpr char kClientSealing[] = "Digest H(A1) to client-to-server sealing key magic constant";
constexpr char kServerSealing[] = "Digest H(A1) to server-to-client sealing key magic constant";

absl::Status Denied(absl::string_view why) {
  return absl::PermissionDeniedError(absl::StrCat("DIGEST-MD5: ", why));
}

absl::Status OpenSslFailed(absl::string_view what) {
  return absl::InternalError(absl::StrCat("DIGEST-MD5: ", what, ": ", TakeOpenSslErrors()));
}

// MD5 of the parts, one after another: 16 bytes.
std::string Md5(std::initializer_list<absl::string_view> parts) {
  std::string digest(16, '\0');
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_md5(), nullptr) == 1;
  for (absl::string_view part : parts) {
    ok = ok && EVP_DigestUpdate(ctx, part.data(), part.size()) == 1;
  }
  unsigned length = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, reinterpret_cast<unsigned char*>(digest.data()), &length) == 1;
  EVP_MD_CTX_free(ctx);
  // MD5 is in OpenSSL's default provider; it fails only out of memory.
  if (!ok) digest.clear();
  return digest;
}

std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

// Netty's line length for base64.
constexpr size_t kBase64Line = 76;

absl::StatusOr<std::string> RandomToken() {
  unsigned char bytes[30];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return OpenSslFailed("RAND_bytes");
  return absl::Base64Escape(absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)));
}

// A quoted-string of RFC 2831's grammar.
std::string Quote(absl::string_view value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

bool IsLws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A challenge's or response's directives (`name=token` or `name="quoted"`, separated by
// commas and white space), names lowercased. A name given twice is refused, except
// `realm`, which a challenge may offer several of (the first is kept).
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ParseDirectives(
    absl::string_view text) {
  absl::flat_hash_map<std::string, std::string> out;
  size_t i = 0;
  const auto skip = [&] {
    while (i < text.size() && (IsLws(text[i]) || text[i] == ',')) ++i;
  };
  for (skip(); i < text.size(); skip()) {
    const size_t name_at = i;
    while (i < text.size() && text[i] != '=' && !IsLws(text[i]) && text[i] != ',') ++i;
    std::string name = absl::AsciiStrToLower(text.substr(name_at, i - name_at));
    while (i < text.size() && IsLws(text[i])) ++i;
    if (name.empty() || i == text.size() || text[i] != '=') {
      return Denied("a token that is not a list of directives");
    }
    ++i;
    while (i < text.size() && IsLws(text[i])) ++i;
    std::string value;
    if (i < text.size() && text[i] == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        value += text[i];
      }
      if (i == text.size()) return Denied(absl::StrCat("an unterminated value of ", name));
      ++i;
    } else {
      const size_t value_at = i;
      while (i < text.size() && text[i] != ',' && !IsLws(text[i])) ++i;
      value = std::string(text.substr(value_at, i - value_at));
    }
    if (out.size() == kMaxDirectives) return Denied("more directives than DIGEST-MD5 has");
    if (!out.emplace(name, std::move(value)).second && name != "realm") {
      return Denied(absl::StrCat("the directive ", name, " twice"));
    }
  }
  return out;
}

const std::string* Find(const absl::flat_hash_map<std::string, std::string>& d,
                        absl::string_view name) {
  auto it = d.find(name);
  return it == d.end() ? nullptr : &it->second;
}

// Whether a comma-separated list (qop-options, cipher-opts) holds `item`.
bool ListHas(absl::string_view list, absl::string_view item) {
  for (absl::string_view x : absl::StrSplit(list, ',')) {
    if (absl::StripAsciiWhitespace(x) == item) return true;
  }
  return false;
}

absl::StatusOr<uint64_t> Maxbuf(const absl::flat_hash_map<std::string, std::string>& d) {
  const std::string* text = Find(d, "maxbuf");
  if (text == nullptr) return kDefaultMaxbuf;
  uint64_t maxbuf = 0;
  if (!absl::SimpleAtoi(*text, &maxbuf) || maxbuf < kMinMaxbuf || maxbuf > kMaxMaxbuf) {
    return Denied(absl::StrCat("a maxbuf of ", text->substr(0, 20), " (", kMinMaxbuf, " to ",
                               kMaxMaxbuf, " are taken)"));
  }
  return maxbuf;
}

// What both ends compute from the exchange (RFC 2831 2.1.2.1): H(A1) for md5-sess, and
// the response-value of the client's response (A2 "AUTHENTICATE:uri") or of the
// server's rspauth (A2 ":uri"), with the 32 zeros auth-int and auth-conf add.
struct Digest {
  std::string username;
  std::string realm;
  std::string nonce;
  std::string cnonce;
  std::string nc;
  std::string qop;

  std::string HA1(absl::string_view password) const {
    return Md5({Md5({username, ":", realm, ":", password}), ":", nonce, ":", cnonce});
  }
  std::string Value(absl::string_view ha1, absl::string_view a2_prefix) const {
    const std::string a2 = absl::StrCat(a2_prefix, kDigestUri,
                                        qop == "auth" ? "" : ":00000000000000000000000000000000");
    return Hex(Md5({Hex(ha1), ":", nonce, ":", nc, ":", cnonce, ":", qop, ":", Hex(Md5({a2}))}));
  }
};

// Odd DES parity in each byte's low bit (which DES itself ignores).
unsigned char WithParity(unsigned char b) {
  return (__builtin_popcount(b >> 1) % 2 == 0) ? (b | 1) : (b & 0xfe);
}

// A DES key of 8 bytes from 56 bits: seven bits a byte, high bits first (RFC 2831 2.4,
// as Java's DIGEST-MD5 spreads them).
void SpreadDesKey(const unsigned char* in7, unsigned char* out8) {
  uint64_t bits = 0;
  for (int i = 0; i < 7; ++i) bits = bits << 8 | in7[i];
  for (int i = 0; i < 8; ++i) {
    out8[i] = WithParity(static_cast<unsigned char>(((bits >> (49 - 7 * i)) & 0x7f) << 1));
  }
}

}  // namespace

namespace sasl_internal {

// One direction of the layer: 3DES-CBC (two keys, K1 K2 K1) whose chain runs on across
// messages, HMAC-MD5 under Ki, and the sequence number.
struct Keys {
  ~Keys() {
    EVP_CIPHER_CTX_free(cipher);
    EVP_MAC_CTX_free(mac);
  }

  static absl::StatusOr<std::unique_ptr<Keys>> Create(absl::string_view kc, absl::string_view ki,
                                                      bool encrypt) {
    auto keys = std::make_unique<Keys>();
    unsigned char des[16];
    const auto* k = reinterpret_cast<const unsigned char*>(kc.data());
    SpreadDesKey(k, des);
    SpreadDesKey(k + 7, des + 8);
    keys->cipher = EVP_CIPHER_CTX_new();
    const bool cipher_ok = keys->cipher != nullptr &&
                           EVP_CipherInit_ex(keys->cipher, EVP_des_ede_cbc(), nullptr, des, k + 8,
                                             encrypt ? 1 : 0) == 1 &&
                           EVP_CIPHER_CTX_set_padding(keys->cipher, 0) == 1;
    Secret::Wipe(des, sizeof(des));
    if (!cipher_ok) return OpenSslFailed("3des");
    EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    keys->mac = hmac == nullptr ? nullptr : EVP_MAC_CTX_new(hmac);
    EVP_MAC_free(hmac);  // the context holds its own reference
    char md5[] = "MD5";
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, md5, 0),
        OSSL_PARAM_construct_end(),
    };
    if (keys->mac == nullptr ||
        EVP_MAC_init(keys->mac, reinterpret_cast<const unsigned char*>(ki.data()), ki.size(),
                     params) != 1) {
      return OpenSslFailed("HMAC-MD5");
    }
    return keys;
  }

  // HMAC-MD5(Ki, seq | message), its first 10 bytes into `out`.
  bool Mac(const unsigned char seq[4], absl::string_view message, unsigned char* out) {
    unsigned char full[16];
    size_t length = 0;
    const bool ok = EVP_MAC_init(mac, nullptr, 0, nullptr) == 1 &&
                    EVP_MAC_update(mac, seq, 4) == 1 &&
                    EVP_MAC_update(mac, reinterpret_cast<const unsigned char*>(message.data()),
                                   message.size()) == 1 &&
                    EVP_MAC_final(mac, full, &length, sizeof(full)) == 1 && length == 16;
    std::memcpy(out, full, kMacBytes);
    return ok;
  }

  // Runs the cipher over n bytes (a multiple of 8), from `in` to `out` (which may be
  // `in`).
  bool Crypt(const unsigned char* in, size_t n, unsigned char* out) {
    int length = 0;
    return n <= static_cast<size_t>(INT32_MAX) &&
           EVP_CipherUpdate(cipher, out, &length, in, static_cast<int>(n)) == 1 &&
           static_cast<size_t>(length) == n;
  }

  EVP_CIPHER_CTX* cipher = nullptr;
  EVP_MAC_CTX* mac = nullptr;
  uint32_t seq = 0;
};

// The client's side of an exchange once the challenge came.
struct Exchange {
  Secret ha1;
  std::string rspauth;  // what the server's must be
  uint64_t server_maxbuf = kDefaultMaxbuf;
};

}  // namespace sasl_internal

using sasl_internal::Keys;

SaslCipher::SaslCipher(std::unique_ptr<Keys> out, std::unique_ptr<Keys> in, size_t max_plain)
    : out_(std::move(out)), in_(std::move(in)), max_plain_(max_plain) {}

SaslCipher::~SaslCipher() = default;

absl::Status SaslCipher::Seal(absl::string_view plain, std::string* wire) {
  while (!plain.empty()) {
    const absl::string_view message = plain.substr(0, max_plain_);
    plain.remove_prefix(message.size());
    unsigned char seq[4];
    const uint32_t be_seq = htobe32(out_->seq);
    std::memcpy(seq, &be_seq, sizeof(seq));
    // frameLen | message | padding (each byte its count, 1 to 8) | MAC | type | seq,
    // written in place and the middle three encrypted there.
    const size_t pad = kBlockBytes - (message.size() + kMacBytes) % kBlockBytes;
    const size_t sealed = message.size() + pad + kMacBytes;
    const uint64_t frame = htobe64(kRecordLengthBytes + sealed + 6);
    const size_t at = wire->size();
    wire->resize(at + kRecordLengthBytes + sealed + 6);
    char* w = wire->data() + at;
    std::memcpy(w, &frame, kRecordLengthBytes);
    auto* s = reinterpret_cast<unsigned char*>(w + kRecordLengthBytes);
    std::memcpy(s, message.data(), message.size());
    std::memset(s + message.size(), static_cast<int>(pad), pad);
    if (!out_->Mac(seq, message, s + message.size() + pad) || !out_->Crypt(s, sealed, s)) {
      wire->resize(at);
      return OpenSslFailed("3des or HMAC-MD5");
    }
    s[sealed] = 0;
    s[sealed + 1] = 1;
    std::memcpy(s + sealed + 2, seq, sizeof(seq));
    ++out_->seq;
  }
  return absl::OkStatus();
}

absl::Status SaslCipher::Unwrap(absl::string_view wrapped, std::string* plain) {
  // At least one block of padding and MAC (16 bytes), a whole number of blocks.
  if (wrapped.size() < 6 + 2 * kBlockBytes || (wrapped.size() - 6) % kBlockBytes != 0) {
    return absl::DataLossError(
        absl::StrCat("SASL: a wrapped message of ", wrapped.size(), " bytes"));
  }
  const size_t sealed = wrapped.size() - 6;
  const auto* tail = reinterpret_cast<const unsigned char*>(wrapped.data() + sealed);
  uint32_t be_seq = 0;
  std::memcpy(&be_seq, tail + 2, sizeof(be_seq));
  if (tail[0] != 0 || tail[1] != 1) {
    return absl::DataLossError("SASL: a wrapped message of another type than 1");
  }
  if (be32toh(be_seq) != in_->seq) {
    return absl::DataLossError(absl::StrCat("SASL: message ", be32toh(be_seq), " where ", in_->seq,
                                            " was next (replayed or reordered)"));
  }
  scratch_.resize(sealed);
  auto* s = reinterpret_cast<unsigned char*>(scratch_.data());
  if (!in_->Crypt(reinterpret_cast<const unsigned char*>(wrapped.data()), sealed, s)) {
    return OpenSslFailed("3des");
  }
  const size_t body = sealed - kMacBytes;
  const size_t pad = s[body - 1];
  // (The smallest record has 6 bytes before its MAC: padding can claim more.)
  const bool padded =
      pad >= 1 && pad <= kBlockBytes && pad <= body &&
      std::all_of(s + body - pad, s + body, [&](unsigned char b) { return b == pad; });
  unsigned char mac[kMacBytes];
  const absl::string_view message(scratch_.data(), padded ? body - pad : 0);
  if (!in_->Mac(tail + 2, message, mac)) return OpenSslFailed("HMAC-MD5");
  if (!padded ||
      !ConstantTimeEquals(absl::string_view(reinterpret_cast<const char*>(mac), kMacBytes),
                          absl::string_view(scratch_.data() + body, kMacBytes))) {
    return absl::DataLossError(
        absl::StrCat("SASL: message ", in_->seq, " does not unwrap (its MAC or padding is wrong)"));
  }
  plain->append(message.data(), message.size());
  ++in_->seq;
  return absl::OkStatus();
}

absl::Status SaslCipher::Open(absl::string_view wire, std::string* plain) {
  while (!wire.empty()) {
    if (record_bytes_ == 0) {
      const size_t take = std::min(kRecordLengthBytes - record_.size(), wire.size());
      record_.append(wire.data(), take);
      wire.remove_prefix(take);
      if (record_.size() < kRecordLengthBytes) break;
      uint64_t be = 0;
      std::memcpy(&be, record_.data(), sizeof(be));
      record_.clear();
      const uint64_t frame = be64toh(be);
      if (frame <= kRecordLengthBytes || frame - kRecordLengthBytes > kMaxRecordBytes) {
        return absl::DataLossError(absl::StrCat("SASL: a record of ", frame, " bytes; at most ",
                                                kMaxRecordBytes + kRecordLengthBytes,
                                                " are taken"));
      }
      record_bytes_ = frame - kRecordLengthBytes;
    }
    if (record_.empty() && wire.size() >= record_bytes_) {  // whole: unwrapped in place
      const absl::string_view whole = wire.substr(0, record_bytes_);
      wire.remove_prefix(record_bytes_);
      record_bytes_ = 0;
      FERRY_RETURN_IF_ERROR(Unwrap(whole, plain));
      continue;
    }
    const size_t take = std::min<uint64_t>(record_bytes_ - record_.size(), wire.size());
    record_.append(wire.data(), take);
    wire.remove_prefix(take);
    if (record_.size() < record_bytes_) break;
    record_bytes_ = 0;
    const absl::Status unwrapped = Unwrap(record_, plain);
    record_.clear();
    if (!unwrapped.ok()) return unwrapped;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SaslCipher>> SaslCipher::FromExchange(absl::string_view ha1,
                                                                     bool server,
                                                                     uint64_t peer_maxbuf) {
  if (ha1.size() != 16 || peer_maxbuf < kMinMaxbuf || peer_maxbuf > kMaxMaxbuf) {
    return absl::InvalidArgumentError("SASL: an H(A1) of 16 bytes and a maxbuf of 1024 or more");
  }
  // RFC 2831 2.3 and 2.4: Kc from the first n bytes of H(A1), n = 16 for 3des.
  const Secret kic(Md5({ha1, kClientSigning}));
  const Secret kis(Md5({ha1, kServerSigning}));
  const Secret kcc(Md5({ha1.substr(0, 16), kClientSealing}));
  const Secret kcs(Md5({ha1.substr(0, 16), kServerSealing}));
  absl::StatusOr<std::unique_ptr<Keys>> out = server ? Keys::Create(kcs.view(), kis.view(), true)
                                                     : Keys::Create(kcc.view(), kic.view(), true);
  absl::StatusOr<std::unique_ptr<Keys>> in = server ? Keys::Create(kcc.view(), kic.view(), false)
                                                    : Keys::Create(kcs.view(), kis.view(), false);
  if (!out.ok()) return out.status();
  if (!in.ok()) return in.status();
  const size_t max_plain = std::min<size_t>(kMaxPiece, peer_maxbuf - kWrapOverhead);
  return std::unique_ptr<SaslCipher>(new SaslCipher(*std::move(out), *std::move(in), max_plain));
}

std::string SaslCredential(absl::string_view secret) {
  std::string flat = absl::Base64Escape(secret);
  std::string lines;
  lines.reserve(flat.size() + flat.size() / kBase64Line);
  for (size_t at = 0; at < flat.size(); at += kBase64Line) {
    if (at > 0) lines.push_back('\n');
    lines.append(flat, at, kBase64Line);
  }
  Secret::Wipe(flat);
  return lines;
}

absl::StatusOr<std::unique_ptr<SaslServer>> SaslServer::Create(absl::string_view secret,
                                                               bool offer_encryption) {
  std::unique_ptr<SaslServer> server(new SaslServer);
  server->password_ = Secret(SaslCredential(secret));
  server->offer_encryption_ = offer_encryption;
  FERRY_ASSIGN_OR_RETURN(server->nonce_, RandomToken());
  return server;
}

SaslServer::~SaslServer() = default;

absl::StatusOr<std::string> SaslServer::Step(absl::string_view client_token) {
  if (complete_) return absl::FailedPreconditionError("SASL: the exchange is complete");
  if (!challenged_) {
    // Spark's client starts with an empty token; one with a response in it would be a
    // subsequent authentication (RFC 2831 2.2), which has no past session here.
    if (!client_token.empty()) return Denied("a first token that is not empty");
    challenged_ = true;
    if (!offer_encryption_) {
      return absl::StrCat("realm=\"", kRealm, "\",nonce=", Quote(nonce_),
                          ",qop=\"auth\",charset=utf-8,algorithm=md5-sess");
    }
    return absl::StrCat("realm=\"", kRealm, "\",nonce=", Quote(nonce_),
                        ",qop=\"auth-conf,auth\",charset=utf-8,cipher=\"", kCipher,
                        "\",maxbuf=", SaslCipher::kMaxRecordBytes, ",algorithm=md5-sess");
  }
  if (client_token.size() > kMaxResponseBytes) {
    return Denied(absl::StrCat("a response of ", client_token.size(), " bytes"));
  }
  FERRY_ASSIGN_OR_RETURN(auto d, ParseDirectives(client_token));
  for (const char* required : {"username", "nonce", "cnonce", "nc", "digest-uri", "response"}) {
    if (Find(d, required) == nullptr) return Denied(absl::StrCat("a response without ", required));
  }
  Digest digest;
  digest.username = *Find(d, "username");
  digest.realm = Find(d, "realm") == nullptr ? "" : *Find(d, "realm");
  digest.nonce = *Find(d, "nonce");
  digest.cnonce = *Find(d, "cnonce");
  digest.nc = *Find(d, "nc");
  digest.qop = Find(d, "qop") == nullptr ? "auth" : *Find(d, "qop");
  if (digest.nonce != nonce_) return Denied("a response to another challenge (its nonce)");
  if (digest.nc != "00000001")
    return Denied(absl::StrCat("a nonce count of ", digest.nc.substr(0, 8)));
  if (digest.cnonce.empty()) return Denied("an empty cnonce");
  if (*Find(d, "digest-uri") != kDigestUri) {
    return Denied(absl::StrCat("a digest-uri other than ", kDigestUri));
  }
  if (Find(d, "authzid") != nullptr && *Find(d, "authzid") != digest.username) {
    return Denied("an authorization id of another user");
  }
  if (const std::string* charset = Find(d, "charset"); charset != nullptr && *charset != "utf-8") {
    return Denied("a charset other than utf-8");
  }
  const bool encrypt = digest.qop == "auth-conf";
  if ((!encrypt && digest.qop != "auth") || (encrypt && !offer_encryption_)) {
    return Denied(absl::StrCat("a qop that was not offered: ", digest.qop.substr(0, 20)));
  }
  if (encrypt && (Find(d, "cipher") == nullptr || *Find(d, "cipher") != kCipher)) {
    return Denied("auth-conf with a cipher other than 3des");
  }
  FERRY_ASSIGN_OR_RETURN(uint64_t maxbuf, Maxbuf(d));

  // An authorization id the same as the user is what no authorization id means.
  const Secret ha1(Find(d, "authzid") == nullptr
                       ? digest.HA1(password_.view())
                       : Md5({Md5({digest.username, ":", digest.realm, ":", password_.view()}), ":",
                              digest.nonce, ":", digest.cnonce, ":", *Find(d, "authzid")}));
  const std::string expected = digest.Value(ha1.view(), "AUTHENTICATE:");
  const std::string& response = *Find(d, "response");
  if (!ConstantTimeEquals(response, expected)) {
    return Denied("the response does not match: a wrong secret");
  }
  const std::string rspauth = absl::StrCat("rspauth=", digest.Value(ha1.view(), ":"));
  if (encrypt) {
    FERRY_ASSIGN_OR_RETURN(cipher_, SaslCipher::FromExchange(ha1.view(), /*server=*/true, maxbuf));
  }
  complete_ = true;
  return rspauth;
}

absl::StatusOr<std::unique_ptr<SaslClient>> SaslClient::Create(absl::string_view secret,
                                                               bool encrypt) {
  std::unique_ptr<SaslClient> client(new SaslClient);
  client->password_ = Secret(SaslCredential(secret));
  client->encrypt_ = encrypt;
  return client;
}

SaslClient::~SaslClient() = default;

absl::StatusOr<std::string> SaslClient::Start() { return std::string(); }

absl::StatusOr<std::string> SaslClient::Step(absl::string_view server_token) {
  if (complete_) return absl::FailedPreconditionError("SASL: the exchange is complete");
  if (exchange_ != nullptr) {  // the server's rspauth
    FERRY_ASSIGN_OR_RETURN(auto d, ParseDirectives(server_token.substr(0, kMaxChallengeBytes)));
    const std::string* rspauth = Find(d, "rspauth");
    if (rspauth == nullptr || !ConstantTimeEquals(*rspauth, exchange_->rspauth)) {
      return Denied("the server's rspauth does not match: it does not know the secret");
    }
    if (encrypt_) {
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<SaslCipher> cipher,
                             SaslCipher::FromExchange(exchange_->ha1.view(), /*server=*/false,
                                                      exchange_->server_maxbuf));
      cipher_ = std::move(cipher);
    }
    exchange_.reset();
    complete_ = true;
    return std::string();
  }
  if (server_token.size() > kMaxChallengeBytes) {
    return Denied(absl::StrCat("a challenge of ", server_token.size(), " bytes"));
  }
  FERRY_ASSIGN_OR_RETURN(auto d, ParseDirectives(server_token));
  const std::string* nonce = Find(d, "nonce");
  const std::string* algorithm = Find(d, "algorithm");
  if (nonce == nullptr || nonce->empty()) return Denied("a challenge without a nonce");
  if (algorithm == nullptr || *algorithm != "md5-sess") {
    return Denied("a challenge whose algorithm is not md5-sess");
  }
  const std::string offered = Find(d, "qop") == nullptr ? "auth" : *Find(d, "qop");
  const std::string qop = encrypt_ ? "auth-conf" : "auth";
  if (!ListHas(offered, qop)) {
    return Denied(absl::StrCat("the server does not offer ", qop, " (it offers ",
                               offered.substr(0, 40), ")"));
  }
  if (encrypt_ && (Find(d, "cipher") == nullptr || !ListHas(*Find(d, "cipher"), kCipher))) {
    return Denied("the server does not offer the 3des cipher");
  }
  auto exchange = std::make_unique<sasl_internal::Exchange>();
  if (encrypt_) {
    FERRY_ASSIGN_OR_RETURN(uint64_t maxbuf, Maxbuf(d));
    exchange->server_maxbuf = maxbuf;
  }
  FERRY_ASSIGN_OR_RETURN(std::string cnonce, RandomToken());
  Digest digest;
  digest.username = SaslCredential(kUser);
  digest.realm = Find(d, "realm") == nullptr ? kRealm : *Find(d, "realm");
  digest.nonce = *nonce;
  digest.cnonce = std::move(cnonce);
  digest.nc = "00000001";
  digest.qop = qop;
  exchange->ha1 = Secret(digest.HA1(password_.view()));
  exchange->rspauth = digest.Value(exchange->ha1.view(), ":");
  std::string response = absl::StrCat(
      "charset=utf-8,username=", Quote(digest.username), ",realm=", Quote(digest.realm),
      ",nonce=", Quote(digest.nonce), ",nc=", digest.nc, ",cnonce=", Quote(digest.cnonce),
      ",digest-uri=\"", kDigestUri, "\",maxbuf=", SaslCipher::kMaxRecordBytes,
      ",response=", digest.Value(exchange->ha1.view(), "AUTHENTICATE:"), ",qop=", qop);
  if (encrypt_) absl::StrAppend(&response, ",cipher=\"", kCipher, "\"");
  exchange_ = std::move(exchange);
  return response;
}

}  // namespace ferry::spark
