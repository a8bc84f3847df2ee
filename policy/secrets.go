package policy

// secrets reads the variables the *_env keys name into the config's Secret
// fields. It is the one step of Load that reads the environment, so that
// validate never needs the secrets (LoadOptions.SkipEnv leaves it out, as
// `switchyard validate` does without --check-env). Like validate, it skips
// the parts that did not decode and reports every problem.
type secrets struct {
	positions
	cfg    *Config
	getenv func(string) string
}

func (s *secrets) resolve() {
	if !s.broken["server"] {
		s.server()
	}
	for _, pool := range s.cfg.Pools {
		if pool.APIKeyEnv == "" || s.broken["pool:"+pool.Name] {
			continue
		}
		if val := s.getenv(pool.APIKeyEnv); val == "" {
			s.errf(p("pools", pool.Name, "api_key_env"), "pool %q: environment variable %s is not set or empty", pool.Name, pool.APIKeyEnv)
		} else {
			pool.APIKey = Secret(val)
		}
	}
}

func (s *secrets) server() {
	sv := &s.cfg.Server
	if sv.AdminTokenEnv != "" {
		if val := s.getenv(sv.AdminTokenEnv); val == "" {
			s.errf(p("server", "admin_token_env"), "server: admin_token_env: environment variable %s is not set or empty", sv.AdminTokenEnv)
		} else if placeholder(val) {
			s.errf(p("server", "admin_token_env"), "server: admin_token_env: environment variable %s holds the example manifests' placeholder %q; set a long random token (openssl rand -hex 32)", sv.AdminTokenEnv, val)
		} else {
			sv.AdminToken = Secret(val)
		}
	}
	if sv.ResponseIDSecretEnv != "" {
		if val := s.getenv(sv.ResponseIDSecretEnv); len(val) < 16 {
			s.errf(p("server", "response_id_secret_env"), "server: response_id_secret_env: environment variable %s must hold at least 16 characters", sv.ResponseIDSecretEnv)
		} else {
			sv.ResponseIDSecret = Secret(val)
		}
	}
	// owner finds a key value given twice: one credential for two names
	// would make every request the first key's, whatever the second's
	// limits and models say.
	owner := map[Secret]*APIKey{}
	for i, k := range sv.APIKeys {
		if k.KeyEnv == "" {
			continue // validate reports it
		}
		at := p("server", "api_keys", i, "key_env")
		if val := s.getenv(k.KeyEnv); val == "" {
			s.errf(at, "api key %q: environment variable %s is not set or empty", k.Name, k.KeyEnv)
		} else if placeholder(val) {
			s.errf(at, "api key %q: environment variable %s holds a placeholder (%q); set the real key", k.Name, k.KeyEnv, val)
		} else if first := owner[Secret(val)]; first != nil {
			s.errf(at, "api key %q: its key (%s) is the same as api key %q's (%s); give each key its own value", k.Name, k.KeyEnv, first.Name, first.KeyEnv)
		} else {
			k.Secret = Secret(val)
			owner[k.Secret] = k
		}
	}
}
