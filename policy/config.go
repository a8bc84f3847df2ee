package policy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"

	"github.com/switchyard/switchyard/policy/internal/yamlnode"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// Config is a validated Switchyard configuration file (docs/config.md). It is
// immutable once Load returns it.
type Config struct {
	// File is the path the config was read from ("" for embedded data).
	File    string `yaml:"-"`
	Version int    `yaml:"version"`

	Server     Server      `yaml:"server"`
	Topology   *Topology   `yaml:"topology,omitempty"`
	Pools      Pools       `yaml:"pools"`
	Classifier *Classifier `yaml:"classifier,omitempty"`
	Models     []Model     `yaml:"models"`
	Session    *Session    `yaml:"session,omitempty"`
	Control    *Control    `yaml:"control,omitempty"`
	Capture    *Capture    `yaml:"capture,omitempty"`
	Routes     []*Route    `yaml:"routes"`

	// root is the file's YAML tree, for positions in later errors.
	root ast.Node
}

// WithListen returns a copy of c whose server listens on listen and
// adminListen instead ("" keeps the file's address): serve's --listen and
// --admin-listen. c itself is not changed; the copy shares everything else.
func (c *Config) WithListen(listen, adminListen string) *Config {
	out := *c
	if listen != "" {
		out.Server.Listen = listen
	}
	if adminListen != "" {
		out.Server.AdminListen = adminListen
	}
	return &out
}

// Position is the line and column in c's file of the value at path (keys
// and list indexes, as in "server", "listen"), or of the nearest parent
// written in the file; 1, 1 for a config not read from text.
func (c *Config) Position(path ...any) (line, col int) {
	if c.root == nil {
		return 1, 1
	}
	return yamlnode.Position(lookup(c.root, path...))
}

// Server is the listener, limits and authentication section.
type Server struct {
	// Listen is the client-facing address. Default 0.0.0.0:8080.
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics and /admin/*. Default 127.0.0.1:9090.
	AdminListen string `yaml:"admin_listen"`
	// MaxBodyBytes caps a request body. Default 8MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// ShutdownGrace is how long SIGTERM waits for in-flight requests.
	// Default 30s; 0s waits for nothing (open streams get their error
	// event at once).
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// DrainDelay is how long, after SIGTERM, /readyz answers 503 while the
	// listener still accepts, so that load balancers stop sending before
	// it closes. Default 5s; 0s turns it off.
	DrainDelay Duration `yaml:"drain_delay"`
	// Instances is how many gateway instances share the traffic: per-key
	// rate limits are divided by it, so rps and burst are cluster-wide
	// figures. Default 1.
	Instances int `yaml:"instances"`
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	// Default 10s; positive.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes idle client keep-alive connections. Default 120s;
	// positive.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxJSONDepth bounds how deeply a request body nests arrays and
	// objects. Default 64.
	MaxJSONDepth int `yaml:"max_json_depth"`
	// BodyTimeout bounds reading a request body. Default 30s; positive.
	BodyTimeout Duration `yaml:"body_timeout"`
	// WriteTimeout ends an exchange when one write to the client makes no
	// progress for this long. Default 60s; 0s turns it off.
	WriteTimeout Duration `yaml:"write_timeout"`
	// LogBodies logs prompts and completions. Default false.
	LogBodies bool `yaml:"log_bodies,omitempty"`
	// APIKeys enables bearer authentication when non-empty.
	APIKeys []*APIKey `yaml:"api_keys,omitempty"`
	// AdminTokenEnv names a variable holding a bearer token that /admin/*
	// requires (and /metrics with AdminTokenMetrics). Default: no token.
	AdminTokenEnv string `yaml:"admin_token_env,omitempty"`
	// AdminTokenMetrics also requires the admin token on /metrics.
	AdminTokenMetrics bool `yaml:"admin_token_metrics,omitempty"`
	// AdminToken is read from AdminTokenEnv; never printed.
	AdminToken Secret `yaml:"-"`
	// MaxConnections caps the client connections open at once on the
	// client listener; one more is answered 503 and closed. Default 0:
	// derived from the process's file-descriptor limit (see
	// docs/config.md).
	MaxConnections int `yaml:"max_connections,omitempty"`
	// MaxConnectionsPerClient caps the client listener's connections from
	// one client address (a trusted proxy is exempt). Default 0: a quarter
	// of the listener's cap, at least 16.
	MaxConnectionsPerClient int `yaml:"max_connections_per_client,omitempty"`
	// AdminMaxConnections is the same cap for the admin listener.
	// Default 256.
	AdminMaxConnections int `yaml:"admin_max_connections"`
	// ResponseIDSecretEnv names a variable holding the secret that signs
	// the stored-response ids clients see (binding each to the API key that
	// made it). Default: a secret derived from the API keys.
	ResponseIDSecretEnv string `yaml:"response_id_secret_env,omitempty"`
	// ResponseIDSecret is read from ResponseIDSecretEnv; never printed.
	ResponseIDSecret Secret `yaml:"-"`
	// TrustedProxies are the addresses (CIDR prefixes or single IPs) of
	// proxies whose X-Forwarded-For names the client: behind one, the
	// client address (a keyless tenant, the per-client connection cap's
	// exemption) is the last untrusted hop it forwards. Default: none.
	TrustedProxies StringList `yaml:"trusted_proxies,omitempty"`
	// Trusted is TrustedProxies, parsed during validation.
	Trusted []netip.Prefix `yaml:"-"`
	// Readiness makes /readyz depend on named pools. By default /readyz
	// is 200 whenever a config is loaded and the gateway is not draining.
	Readiness *Readiness `yaml:"readiness,omitempty"`
}

// Readiness configures what /readyz requires besides a loaded config.
type Readiness struct {
	// RequirePools: /readyz is 503 while any of these pools has no
	// available replica.
	RequirePools StringList `yaml:"require_pools,omitempty"`
}

// APIKey is one client credential. The key itself is read from KeyEnv.
type APIKey struct {
	Name   string `yaml:"name"`
	KeyEnv string `yaml:"key_env"`
	// Models is the allow-list of client model names. Default ["*"]:
	// every name.
	Models StringList `yaml:"models"`
	Rate   *Rate      `yaml:"rate,omitempty"`
	// Weight is the key's share of a full replica's queue against other
	// keys' waiting requests. Default 1.
	Weight int `yaml:"weight"`
	// MaxInflight caps the key's requests in flight at once, across every
	// pool; one more gets 429. Default 0: no cap.
	MaxInflight int `yaml:"max_inflight,omitempty"`
	// Secret is the key read from the environment; never printed.
	Secret Secret `yaml:"-"`
}

// Rate is a token-bucket rate limit.
type Rate struct {
	RPS   float64 `yaml:"rps"`
	Burst int     `yaml:"burst"`
}

// Secret is a string that redacts itself in logs and printed output.
type Secret string

func (Secret) String() string { return "<redacted>" }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue("<redacted>") }

// MarshalYAML implements yaml.InterfaceMarshaler so a secret never leaks
// through /admin/config.
func (Secret) MarshalYAML() (any, error) { return "<redacted>", nil }

// Topology says where replicas run (fabric, nodes, partitions).
type Topology struct {
	Fabric     string       `yaml:"fabric" json:"fabric"`
	Nodes      []string     `yaml:"nodes" json:"nodes"`
	Partitions []*Partition `yaml:"partitions,omitempty" json:"partitions,omitempty"`
	// SharedNodes lets one node serve several replicas.
	SharedNodes bool `yaml:"shared_nodes,omitempty" json:"shared_nodes,omitempty"`
	// NodeMemory is each node's memory for model weights (128GiB for a
	// DGX Spark); with a pool's memory need, validate checks that each
	// replica's nodes can hold its model.
	NodeMemory ByteSize `yaml:"node_memory,omitempty" json:"node_memory,omitempty"`
	// MemoryUtilization is the share of a node's memory vLLM may use
	// (its --gpu-memory-utilization). Default 0.9, vLLM's default.
	MemoryUtilization float64 `yaml:"memory_utilization" json:"memory_utilization,omitempty"`
}

// Partition is a group of nodes on a switch.
type Partition struct {
	Name  string   `yaml:"name" json:"name"`
	Nodes []string `yaml:"nodes" json:"nodes"`
}

// Pools are the pools in the order the file declares them.
type Pools []*Pool

// Get returns the pool called name, or nil.
func (ps Pools) Get(name string) *Pool {
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// MarshalYAML writes the pools as the file declares them: a mapping from
// name to pool, in file order.
func (ps Pools) MarshalYAML() (any, error) {
	out := make(yaml.MapSlice, len(ps))
	for i, p := range ps {
		out[i] = yaml.MapItem{Key: p.Name, Value: p}
	}
	return out, nil
}

// Render writes c back as YAML that Load reads to the same config (with
// every default written out): what GET /admin/config serves. Secrets are
// never in it; only the names of the variables holding them.
func Render(c *Config) ([]byte, error) {
	return yaml.MarshalWithOptions(c, yaml.IndentSequence(true))
}

// Names returns the pool names in file order.
func (ps Pools) Names() []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// Pool is a set of interchangeable replicas serving one model.
type Pool struct {
	Name string `yaml:"-"`
	// Model is the name the backends serve; the request's model is rewritten to it.
	Model string `yaml:"model"`
	// Balance names the balancer. Default least_outstanding.
	Balance string `yaml:"balance"`
	// MaxInflight caps requests per replica (0 = unlimited). Beyond it,
	// requests wait up to QueueTimeout for a slot, then get 503.
	MaxInflight int `yaml:"max_inflight,omitempty"`
	// QueueTimeout is the bounded wait for a slot. Default 5s; 0s: no
	// wait (503 at once when every replica is at MaxInflight).
	QueueTimeout Duration `yaml:"queue_timeout"`
	// ShareReserve is the window a tenant's slot time on a replica is
	// weighed over: a freed slot goes to the waiting tenant with the
	// least, and a tenant that held a slot at least a fifth of it reserves
	// the most it held at once (pools, share.go). Default 10s; 0s: off (a
	// free slot goes to whoever asks).
	ShareReserve Duration `yaml:"share_reserve"`
	// ConnectTimeout bounds the TCP dial to a replica. Default 2s; positive.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// ResponseHeaderTimeout bounds the wait for a replica's response headers
	// (vLLM sends them once the request is scheduled). Default 5m; positive.
	ResponseHeaderTimeout Duration `yaml:"response_header_timeout"`
	// FirstTokenTimeout bounds the wait for a stream's first event once
	// its headers arrived. Default 5m; 0s turns it off.
	FirstTokenTimeout Duration `yaml:"first_token_timeout"`
	// StreamIdleTimeout bounds the gap between two events of a stream.
	// Default 2m; 0s turns it off.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// MaxStreamDuration bounds a whole stream. Default 0 (off).
	MaxStreamDuration Duration `yaml:"max_stream_duration,omitempty"`
	// MaxModelLen is the replicas' context length (vLLM's
	// --max-model-len); with it, an answer length a client asks for that
	// cannot fit beside its prompt is lowered to what fits. 0: unknown.
	MaxModelLen int `yaml:"max_model_len,omitempty"`
	// Retries is how many other replicas are tried before the first byte
	// reached the client. Default 2; 0: none.
	Retries int `yaml:"retries"`
	// APIKeyEnv names a variable holding the bearer key vLLM was started with.
	APIKeyEnv string `yaml:"api_key_env,omitempty"`
	APIKey    Secret `yaml:"-"`

	// Memory is what one replica of the model needs (weights and the KV
	// cache it should keep); or Parameters and DType give the weights'
	// size. With topology.node_memory, validate checks the fit.
	Memory     ByteSize   `yaml:"memory,omitempty"`
	Parameters ParamCount `yaml:"parameters,omitempty"`
	DType      string     `yaml:"dtype,omitempty"`

	Health   Health     `yaml:"health"`
	Outlier  Outlier    `yaml:"outlier"`
	Resume   Resume     `yaml:"resume"`
	Scrape   Scrape     `yaml:"scrape"`
	Affinity Affinity   `yaml:"affinity"`
	Replicas []*Replica `yaml:"replicas,omitempty"`
	// Discovery finds the replicas in DNS instead of Replicas (exclusive
	// with it); see discovery.go.
	Discovery *Discovery `yaml:"discovery,omitempty"`
}

// DTypes are the bytes per parameter of the dtypes a pool may declare.
var DTypes = map[string]float64{"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp4": 0.5, "nvfp4": 0.5, "int4": 0.5, "mxfp4": 0.5}

// MemoryNeed is a replica's memory need: Memory, else the weights'
// size from Parameters and DType, else 0 (unknown).
func (p *Pool) MemoryNeed() ByteSize {
	if p.Memory > 0 {
		return p.Memory
	}
	if b, ok := DTypes[p.DType]; ok && p.Parameters > 0 {
		return ByteSize(float64(p.Parameters) * b)
	}
	return 0
}

func (p *Pool) memorySource() string {
	if p.Memory > 0 {
		return "memory"
	}
	return fmt.Sprintf("%s parameters in %s", p.Parameters, p.DType)
}

// Health configures active health checks. Interval, Timeout and the
// thresholds are positive (Disabled turns probes off).
type Health struct {
	Path           string   `yaml:"path"`
	Interval       Duration `yaml:"interval"`
	Timeout        Duration `yaml:"timeout"`
	UnhealthyAfter int      `yaml:"unhealthy_after"`
	HealthyAfter   int      `yaml:"healthy_after"`
	// CheckModels makes each probe also require GET /v1/models to list
	// the pool's model. Default false (the check then runs only while a
	// replica is marked misconfigured).
	CheckModels bool `yaml:"check_models,omitempty"`
	// Disabled turns active probes off.
	Disabled bool `yaml:"disabled,omitempty"`
}

// Resume configures continuing a chat stream on another replica when its
// replica fails mid-way.
type Resume struct {
	// Enabled turns resuming on. Default false.
	Enabled bool `yaml:"enabled,omitempty"`
	// MaxAttempts is how many other replicas may continue one stream.
	// Default 1.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxBuffer bounds the text kept per stream to resume it; a longer
	// answer is not resumed. Default 1MiB.
	MaxBuffer ByteSize `yaml:"max_buffer"`
}

// Outlier configures passive health (outlier detection, as in Envoy).
type Outlier struct {
	// Consecutive5xx ejects a replica after this many 5xx answers or cut
	// streams in a row; 0 turns it off. Default 5.
	Consecutive5xx int `yaml:"consecutive_5xx"`
	// ConsecutiveConnectFailures ejects after this many failures to get any
	// answer in a row; 0 turns it off. Default 3.
	ConsecutiveConnectFailures int `yaml:"consecutive_connect_failures"`
	// MaxEjectionPercent caps the share of the pool ejected at once (one
	// replica of two or more may always be). Default 50.
	MaxEjectionPercent int `yaml:"max_ejection_percent"`
	// BaseEjection times the number of ejections in a row is how long an
	// ejection lasts, up to MaxEjection. Defaults 5s and the larger of
	// 2m and BaseEjection; both positive.
	BaseEjection Duration `yaml:"base_ejection"`
	MaxEjection  Duration `yaml:"max_ejection"`
	// CountTimeouts counts timeouts as 5xx. Default false.
	CountTimeouts bool `yaml:"count_timeouts,omitempty"`
}

// Scrape configures the vLLM /metrics scraping used by kv_aware and p2c.
// The durations are positive.
type Scrape struct {
	Path      string   `yaml:"path"`
	Interval  Duration `yaml:"interval"`
	Timeout   Duration `yaml:"timeout"`
	Staleness Duration `yaml:"staleness"`
}

// Affinity tunes the affinity balancer.
type Affinity struct {
	// Depth is how many leading messages form the prefix key. Default 2.
	Depth int `yaml:"depth"`
	// LoadFactor: a replica above LoadFactor × fair share passes the key on. Default 1.25.
	LoadFactor float64 `yaml:"load_factor"`
}

// Replica is one vLLM server (possibly spanning several nodes).
type Replica struct {
	Name  string   `yaml:"name"`
	URL   string   `yaml:"url"`
	Nodes []string `yaml:"nodes,omitempty"`
	// Parsed is URL, parsed during validation.
	Parsed *url.URL `yaml:"-"`
}

// Classifier configures request classification.
type Classifier struct {
	Kind string `yaml:"kind"`
	Pool string `yaml:"pool,omitempty"`
	// Labels are the classes, in order; LabelInfo carries descriptions.
	Labels       []string          `yaml:"-"`
	Descriptions map[string]string `yaml:"-"`
	RawLabels    []LabelSpec       `yaml:"labels"`
	// MaxInputChars truncates what the classifier reads (head and tail). Default 4000.
	MaxInputChars int `yaml:"max_input_chars"`
	// Timeout bounds one classifier call. Default 300ms; positive.
	Timeout Duration `yaml:"timeout"`
	// OnError is the label used when the classifier fails. Default: the last label.
	OnError string `yaml:"on_error"`
	// Cache holds results keyed on a hash of what was sent.
	Cache Cache `yaml:"cache"`
	// Concurrency caps concurrent classifier calls. Default 64.
	Concurrency int `yaml:"concurrency"`
	// GuidedChoice sends the older `guided_choice` field instead of
	// `structured_outputs.choice` (vLLM before structured_outputs).
	GuidedChoice bool `yaml:"guided_choice,omitempty"`
	// Prompt replaces the default system prompt: plain text in which
	// {labels} becomes the list of labels.
	Prompt string `yaml:"prompt,omitempty"`
	// Breaker stops calling a failing classifier pool for a while.
	Breaker Breaker `yaml:"breaker"`
	// ReservedSlots of each classifier-pool replica's max_inflight only
	// the classifier's calls may use. Default 0 (the calls still wait
	// ahead of every other request).
	ReservedSlots int `yaml:"reserved_slots"`
}

// Breaker is the classifier's circuit breaker.
type Breaker struct {
	// Failures in a row open the circuit; 0 turns the breaker off.
	// Default 5.
	Failures int `yaml:"failures"`
	// Cooldown is how long an open circuit calls nothing before one probe.
	// Default 10s; positive.
	Cooldown Duration `yaml:"cooldown"`
}

// LabelSpec is a label, written either as a string or as {name: description}.
type LabelSpec struct {
	Name        string
	Description string
}

// MarshalYAML writes a label back as it was given.
func (l LabelSpec) MarshalYAML() (any, error) {
	if l.Description == "" {
		return l.Name, nil
	}
	return map[string]string{l.Name: l.Description}, nil
}

// Cache configures the classifier's result cache.
type Cache struct {
	// Size is the number of entries; 0 disables the cache. Default 50000.
	Size int `yaml:"size"`
	// TTL is how long an entry lives. Default 10m; positive.
	TTL Duration `yaml:"ttl"`
}

// Model is a client-visible model name, or a glob pattern of names
// (path.Match syntax: *, ?, [a-z]), routed by the policy or to one pool.
type Model struct {
	Name string `yaml:"name"`
	// Route "policy" sends the name through the routes; or
	Route string `yaml:"route,omitempty"`
	// Pool sends it straight to that pool.
	Pool string `yaml:"pool,omitempty"`
	// RewriteResponseModel writes the client's name back into the
	// answer's model field (some agents check it). Default false: the
	// answer names the model the replica served.
	RewriteResponseModel bool `yaml:"rewrite_response_model,omitempty"`
	// Small marks the name (or every name the pattern matches) as a
	// client's own small model: the name an agent sends for its quick
	// work (Claude Code's haiku-class calls, OpenCode's small_model).
	// Routes match it with small_model: true. Default false.
	Small bool `yaml:"small,omitempty"`
}

// IsPattern reports whether the name is a glob pattern.
func (m Model) IsPattern() bool { return strings.ContainsAny(m.Name, "*?[") }

// Control is the routing economics section.
type Control struct {
	// Share holds one pool's share of policy-routed requests at a target
	// by moving the routes' auto score bounds.
	Share *ShareControl `yaml:"share,omitempty"`
}

// ShareControl configures the share controller.
type ShareControl struct {
	Pool   string      `yaml:"pool"`
	Target ShareTarget `yaml:"target"`
	// Window is the time scale of the measured share. Default 2m.
	Window Duration `yaml:"window"`
	// Utilization is the pool's utilization capacity mode aims at.
	// Default 0.8.
	Utilization float64 `yaml:"utilization"`
}

// ShareTarget is a share between 0 and 1, or "capacity".
type ShareTarget struct {
	Value    float64
	Capacity bool
}

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (t *ShareTarget) UnmarshalYAML(node ast.Node) error {
	if v, ok := yamlnode.ScalarString(node); ok && v == "capacity" {
		*t = ShareTarget{Capacity: true}
		return nil
	}
	n, ok := yamlnode.ScalarNumber(node)
	if !ok {
		return nodeErrorf(node, "expected a share between 0 and 1 or capacity, got %s", yamlnode.Describe(node))
	}
	*t = ShareTarget{Value: n}
	return nil
}

// MarshalYAML writes the target as it was given.
func (t ShareTarget) MarshalYAML() (any, error) {
	if t.Capacity {
		return "capacity", nil
	}
	return t.Value, nil
}

// Session keeps a conversation on its first decision.
type Session struct {
	Header string `yaml:"header,omitempty"`
	// FromUser also takes the body's user field as the session id when
	// the header is absent. Default false: in the OpenAI API user names
	// the end user, and one person's conversations would share one
	// decision.
	FromUser bool `yaml:"from_user,omitempty"`
	// TTL is how long a decision is remembered. Default 30m; positive.
	TTL Duration `yaml:"ttl"`
	// Size caps the number of remembered sessions. Default 100000; at
	// least 1.
	Size int `yaml:"size"`
	// Implicit gives a request that carries no session id one taken from
	// its conversation's opening (system prompt, first user turn, tools).
	// Default true.
	Implicit bool `yaml:"implicit"`
	// MoveDown says when a session may move to a weaker route:
	// "new_instruction" (the default): at a new instruction from the user,
	// which is then decided on its own evidence as a new session would be;
	// "never": a session moves up, never down. Never inside a tool loop.
	MoveDown string `yaml:"move_down"`
}

// The values of session.move_down.
const (
	MoveDownNewInstruction = "new_instruction"
	MoveDownNever          = "never"
)

// Capture records the requests of chosen keys, or a sampled share of all,
// to rotating JSON Lines files (one {"path", "headers", "body"} a line:
// the format switchyard replay reads). Off without the section.
type Capture struct {
	// Dir is the folder the files are written to (created if missing).
	Dir string `yaml:"dir"`
	// Keys are the API key names whose requests are all recorded.
	Keys StringList `yaml:"keys,omitempty"`
	// Sample is the share of the other requests recorded (0 to 1).
	Sample float64 `yaml:"sample,omitempty"`
	// MaxFileSize starts a new file once one would grow past it. Default
	// 64MiB.
	MaxFileSize ByteSize `yaml:"max_file_size"`
	// MaxFiles is how many files are kept; the oldest is removed. Default
	// 10.
	MaxFiles int `yaml:"max_files"`
}

// Route is one ordered policy rule.
type Route struct {
	Name     string   `yaml:"name"`
	When     *When    `yaml:"when,omitempty"`
	To       string   `yaml:"to,omitempty"`
	Split    Split    `yaml:"split,omitempty"`
	Fallback []string `yaml:"fallback,omitempty"`
	Spill    *Spill   `yaml:"spill,omitempty"`
	// Sticky=false keeps this rule's choice out of the session store
	// (DefaultRoute has true).
	Sticky bool `yaml:"sticky"`
	// Side marks the requests this route matches as side requests (an
	// agent's title, summary or quick call): they are routed by this
	// route on their own, and neither read nor change their session's
	// kept decision. Default false.
	Side bool `yaml:"side,omitempty"`
}

// Split is a weighted choice among pools, in file order.
type Split []SplitEntry

// SplitEntry is one weighted target of a split.
type SplitEntry struct {
	Pool   string
	Weight int
}

// Spill sends requests to another pool when every replica of the chosen one
// is saturated.
type Spill struct {
	To            string `yaml:"to" json:"to"`
	WhenQueueOver int    `yaml:"when_queue_over" json:"when_queue_over"`
}

// When is a route condition; all given fields must hold.
type When struct {
	Class        StringList         `yaml:"class,omitempty"`
	Score        map[string]*NumCmp `yaml:"score,omitempty"`
	Model        StringList         `yaml:"model,omitempty"`
	Tools        *NumCmp            `yaml:"tools,omitempty"`
	Messages     *NumCmp            `yaml:"messages,omitempty"`
	PromptTokens *NumCmp            `yaml:"prompt_tokens,omitempty"`
	Stream       *bool              `yaml:"stream,omitempty"`
	// MaxTokens compares the answer length the request asks for
	// (max_tokens, max_completion_tokens, max_output_tokens); a request
	// that sets none asks for no bound: only gt and gte bounds hold.
	MaxTokens *NumCmp `yaml:"max_tokens,omitempty"`
	// SmallModel holds when the request's model name is (true) or is not
	// (false) one of the models: entries marked small: true.
	SmallModel *bool `yaml:"small_model,omitempty"`
	// SystemContains holds when the system prompt contains one of the
	// strings (case-sensitive): an operator's fingerprint of a known side
	// request's instructions.
	SystemContains StringList `yaml:"system_contains,omitempty"`
	// ToolError holds when the request's latest tool result reads (true)
	// or does not read (false) as a failure: a Messages tool_result with
	// is_error, or an output that reports a non-zero exit, a traceback,
	// an exception or error line, failing tests, a command or file not
	// found. A request whose last message is not a tool result has none.
	ToolError *bool `yaml:"tool_error,omitempty"`
	// RepeatedCall holds when the latest tool call repeats (true) or does
	// not repeat (false) one of the conversation's last eight calls with
	// identical arguments: the agent is spinning.
	RepeatedCall *bool                 `yaml:"repeated_call,omitempty"`
	Header       map[string]StringList `yaml:"header,omitempty"`
	Key          StringList            `yaml:"key,omitempty"`
	Any          []*When               `yaml:"any,omitempty"`
	Not          *When                 `yaml:"not,omitempty"`
}
