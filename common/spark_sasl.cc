#include "common/spark_sasl.h"

#include <pthread.h>
#include <sasl/sasl.h>
#include <sasl/saslplug.h>
#include <string.h>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ferry::spark {

namespace sasl_internal {

struct Credentials {
  ~Credentials() {
    explicit_bzero(password.data(), password.size());
    if (secret != nullptr) {
      explicit_bzero(secret, sizeof(sasl_secret_t) + password.size());
      std::free(secret);
    }
  }

  std::string user;      // base64("sparkSaslUser")
  std::string password;  // base64(secret)
  sasl_secret_t* secret = nullptr;  // the client's copy of the password, as Cyrus asks
  std::vector<sasl_callback_t> callbacks;
};

}  // namespace sasl_internal

namespace {

using sasl_internal::Credentials;

// Spark's names (SparkSaslServer, SecurityManager): a SASL peer made with no protocol
// and the realm as its server name, so the digest-uri is "null/default".
constexpr char kService[] = "null";
constexpr char kRealm[] = "default";
constexpr char kUser[] = "sparkSaslUser";
constexpr char kMechanism[] = "DIGEST-MD5";
// Our auxiliary-property plugin, and the connection option it reads the password from.
constexpr char kPlugin[] = "ferry";
constexpr char kPasswordOption[] = "password";

using Callback = int (*)(void);  // sasl_callback_t's untyped procedure

// A callback as sasl_callback_t holds it; Cyrus calls it with the type its id implies.
// (Through void(*)(), the one function type a cast to any other does not warn of.)
template <typename Function>
Callback AsCallback(Function* f) {
  return reinterpret_cast<Callback>(reinterpret_cast<void (*)()>(f));
}

// Cyrus's own mutexes do nothing unless the application gives it some.
void* MutexAlloc() {
  auto* mutex = new pthread_mutex_t;
  pthread_mutex_init(mutex, nullptr);
  return mutex;
}
int MutexLock(void* mutex) {
  return pthread_mutex_lock(static_cast<pthread_mutex_t*>(mutex)) == 0 ? SASL_OK : SASL_FAIL;
}
int MutexUnlock(void* mutex) {
  return pthread_mutex_unlock(static_cast<pthread_mutex_t*>(mutex)) == 0 ? SASL_OK : SASL_FAIL;
}
void MutexFree(void* mutex) {
  pthread_mutex_destroy(static_cast<pthread_mutex_t*>(mutex));
  delete static_cast<pthread_mutex_t*>(mutex);
}

int SetOption(const char* value, const char** result, unsigned* length) {
  *result = value;
  if (length != nullptr) *length = static_cast<unsigned>(std::strlen(value));
  return SASL_OK;
}

// The process's options: DIGEST-MD5 only, passwords from our plugin alone (no sasldb
// file is looked for), no cache of past sessions for fast reauthentication.
int GlobalOption(void*, const char*, const char* option, const char** result,
                 unsigned* length) {
  if (std::strcmp(option, "mech_list") == 0) return SetOption(kMechanism, result, length);
  if (std::strcmp(option, "auxprop_plugin") == 0) return SetOption(kPlugin, result, length);
  if (std::strcmp(option, "reauth_timeout") == 0) return SetOption("0", result, length);
  return SASL_FAIL;
}

// Cyrus writes to syslog by default; failures reach the caller through sasl_errdetail.
int DropLog(void*, int, const char*) { return SASL_OK; }

// A server connection's option: its password, for the plugin below.
int ConnectionOption(void* context, const char* plugin, const char* option,
                     const char** result, unsigned* length) {
  if (plugin == nullptr || std::strcmp(plugin, kPlugin) != 0 ||
      std::strcmp(option, kPasswordOption) != 0) {
    return SASL_FAIL;
  }
  const auto* credentials = static_cast<const Credentials*>(context);
  *result = credentials->password.c_str();
  if (length != nullptr) *length = static_cast<unsigned>(credentials->password.size());
  return SASL_OK;
}

// The auxiliary-property lookup DIGEST-MD5 makes for the user's password: every user
// name gets the connection's password, as Spark's server gives its secret to whatever
// name the client sends; knowing the secret is what authenticates.
int AuxpropLookup(void*, sasl_server_params_t* params, unsigned flags, const char*,
                  unsigned) {
  if ((flags & SASL_AUXPROP_AUTHZID) != 0) return SASL_OK;
  const char* password = nullptr;
  unsigned length = 0;
  if (params->utils->getopt(params->utils->getopt_context, kPlugin, kPasswordOption,
                            &password, &length) != SASL_OK ||
      password == nullptr) {
    return SASL_NOUSER;
  }
  for (const propval* value = params->utils->prop_get(params->propctx);
       value != nullptr && value->name != nullptr; ++value) {
    if (std::strcmp(value->name, SASL_AUX_PASSWORD) != 0) continue;
    if (value->values != nullptr) {
      if ((flags & SASL_AUXPROP_OVERRIDE) == 0) continue;
      params->utils->prop_erase(params->propctx, value->name);
    }
    params->utils->prop_set(params->propctx, value->name, password, static_cast<int>(length));
  }
  return SASL_OK;
}

sasl_auxprop_plug_t auxprop_plugin = {
    0, 0, nullptr, nullptr, &AuxpropLookup, const_cast<char*>(kPlugin), nullptr,
};

int AuxpropInit(const sasl_utils_t*, int max_version, int* out_version,
                sasl_auxprop_plug_t** plugin, const char*) {
  if (max_version < SASL_AUXPROP_PLUG_VERSION) return SASL_BADVERS;
  *out_version = SASL_AUXPROP_PLUG_VERSION;
  *plugin = &auxprop_plugin;
  return SASL_OK;
}

absl::Status Initialize() {
  static absl::once_flag once;
  static int result = SASL_OK;
  static const char* step = "";
  absl::call_once(once, [] {
    static sasl_callback_t callbacks[] = {
        {SASL_CB_GETOPT, AsCallback(&GlobalOption), nullptr},
        {SASL_CB_LOG, AsCallback(&DropLog), nullptr},
        {SASL_CB_LIST_END, nullptr, nullptr},
    };
    sasl_set_mutex(&MutexAlloc, &MutexLock, &MutexUnlock, &MutexFree);
    step = "sasl_server_init";
    result = sasl_server_init(callbacks, "ferry");
    if (result != SASL_OK) return;
    step = "sasl_auxprop_add_plugin";
    result = sasl_auxprop_add_plugin(kPlugin, &AuxpropInit);
    if (result != SASL_OK) return;
    step = "sasl_client_init";
    result = sasl_client_init(callbacks);
  });
  if (result == SASL_OK) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("Cyrus SASL: ", step, ": ",
                                          sasl_errstring(result, nullptr, nullptr)));
}

// No security layer: `auth` is the only protection offered or accepted.
absl::Status AuthenticationOnly(sasl_conn_t* conn) {
  sasl_security_properties_t properties{};
  properties.min_ssf = 0;
  properties.max_ssf = 0;
  properties.maxbufsize = 0;
  if (sasl_setprop(conn, SASL_SEC_PROPS, &properties) != SASL_OK) {
    return absl::InternalError(absl::StrCat("Cyrus SASL: ", sasl_errdetail(conn)));
  }
  return absl::OkStatus();
}

std::string Token(const char* data, unsigned length) {
  return data == nullptr ? std::string() : std::string(data, length);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SaslServer>> SaslServer::Create(absl::string_view secret) {
  if (absl::Status s = Initialize(); !s.ok()) return s;
  std::unique_ptr<SaslServer> server(new SaslServer);
  server->credentials_ = std::make_unique<Credentials>();
  Credentials& credentials = *server->credentials_;
  credentials.password = absl::Base64Escape(secret);
  credentials.callbacks = {
      {SASL_CB_GETOPT, AsCallback(&ConnectionOption), &credentials},
      {SASL_CB_LIST_END, nullptr, nullptr},
  };
  const int made = sasl_server_new(kService, kRealm, kRealm, nullptr, nullptr,
                                   credentials.callbacks.data(), SASL_SUCCESS_DATA,
                                   &server->conn_);
  if (made != SASL_OK) {
    return absl::InternalError(
        absl::StrCat("Cyrus SASL: sasl_server_new: ", sasl_errstring(made, nullptr, nullptr)));
  }
  if (absl::Status s = AuthenticationOnly(server->conn_); !s.ok()) return s;
  return server;
}

SaslServer::~SaslServer() {
  if (conn_ != nullptr) sasl_dispose(&conn_);
}

absl::StatusOr<std::string> SaslServer::Step(absl::string_view client_token) {
  if (complete_) return absl::FailedPreconditionError("SASL: the exchange is complete");
  const char* in = client_token.empty() ? nullptr : client_token.data();
  const auto in_length = static_cast<unsigned>(client_token.size());
  const char* out = nullptr;
  unsigned out_length = 0;
  const int result =
      started_ ? sasl_server_step(conn_, in, in_length, &out, &out_length)
               : sasl_server_start(conn_, kMechanism, in, in_length, &out, &out_length);
  started_ = true;
  if (result == SASL_OK) {
    complete_ = true;
  } else if (result != SASL_CONTINUE) {
    return absl::PermissionDeniedError(absl::StrCat("DIGEST-MD5: ", sasl_errdetail(conn_)));
  }
  return Token(out, out_length);
}

namespace {

int ClientName(void* context, int id, const char** result, unsigned* length) {
  if (id != SASL_CB_AUTHNAME) return SASL_FAIL;
  const auto* credentials = static_cast<const Credentials*>(context);
  *result = credentials->user.c_str();
  if (length != nullptr) *length = static_cast<unsigned>(credentials->user.size());
  return SASL_OK;
}

int ClientSecret(sasl_conn_t*, void* context, int id, sasl_secret_t** secret) {
  if (id != SASL_CB_PASS) return SASL_FAIL;
  *secret = static_cast<Credentials*>(context)->secret;
  return SASL_OK;
}

int ClientRealm(void*, int id, const char**, const char** result) {
  if (id != SASL_CB_GETREALM) return SASL_FAIL;
  *result = kRealm;
  return SASL_OK;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SaslClient>> SaslClient::Create(absl::string_view secret) {
  if (absl::Status s = Initialize(); !s.ok()) return s;
  std::unique_ptr<SaslClient> client(new SaslClient);
  client->credentials_ = std::make_unique<Credentials>();
  Credentials& credentials = *client->credentials_;
  credentials.user = absl::Base64Escape(kUser);
  credentials.password = absl::Base64Escape(secret);
  credentials.secret =
      static_cast<sasl_secret_t*>(std::malloc(sizeof(sasl_secret_t) + credentials.password.size()));
  if (credentials.secret == nullptr) return absl::ResourceExhaustedError("SASL: out of memory");
  credentials.secret->len = credentials.password.size();
  std::memcpy(credentials.secret->data, credentials.password.data(), credentials.password.size());
  credentials.callbacks = {
      {SASL_CB_AUTHNAME, AsCallback(&ClientName), &credentials},
      {SASL_CB_PASS, AsCallback(&ClientSecret), &credentials},
      {SASL_CB_GETREALM, AsCallback(&ClientRealm), &credentials},
      {SASL_CB_LIST_END, nullptr, nullptr},
  };
  const int made = sasl_client_new(kService, kRealm, nullptr, nullptr,
                                   credentials.callbacks.data(), 0, &client->conn_);
  if (made != SASL_OK) {
    return absl::InternalError(
        absl::StrCat("Cyrus SASL: sasl_client_new: ", sasl_errstring(made, nullptr, nullptr)));
  }
  if (absl::Status s = AuthenticationOnly(client->conn_); !s.ok()) return s;
  return client;
}

SaslClient::~SaslClient() {
  if (conn_ != nullptr) sasl_dispose(&conn_);
}

absl::StatusOr<std::string> SaslClient::Start() {
  // With no place for a first token, Cyrus takes no step before the server's challenge,
  // so its DIGEST-MD5 never tries a fast reauthentication from a past session (whose
  // client-first response Spark's server would refuse): every exchange is a full one.
  const char* mechanism = nullptr;
  const int result = sasl_client_start(conn_, kMechanism, nullptr, nullptr, nullptr, &mechanism);
  if (result != SASL_CONTINUE) {
    return absl::InternalError(absl::StrCat("DIGEST-MD5: ", sasl_errdetail(conn_)));
  }
  return std::string();
}

absl::StatusOr<std::string> SaslClient::Step(absl::string_view server_token) {
  if (complete_) return absl::FailedPreconditionError("SASL: the exchange is complete");
  const char* out = nullptr;
  unsigned out_length = 0;
  const int result = sasl_client_step(conn_, server_token.data(),
                                      static_cast<unsigned>(server_token.size()), nullptr,
                                      &out, &out_length);
  if (result == SASL_OK) {
    complete_ = true;
  } else if (result != SASL_CONTINUE) {
    return absl::PermissionDeniedError(absl::StrCat("DIGEST-MD5: ", sasl_errdetail(conn_)));
  }
  return Token(out, out_length);
}

}  // namespace ferry::spark
