package policy

import (
	"fmt"
	"time"
)

// The defaults, in one place. Each section's Default value is written into
// the struct before its YAML is decoded (as Prometheus's config does), so a
// value the file gives, zero included, always replaces the default, and a
// zero that makes no sense is refused by validate rather than replaced.
const (
	DefaultListen            = "0.0.0.0:8080"
	DefaultAdminListen       = "127.0.0.1:9090"
	DefaultMaxBodyBytes      = 8 << 20
	DefaultShutdownGrace     = 30 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxJSONDepth      = 64
	DefaultBodyTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultDrainDelay        = 5 * time.Second
	DefaultAdminMaxConns     = 256
	DefaultBalance           = "least_outstanding"
	DefaultQueueTimeout      = 5 * time.Second
	DefaultShareReserve      = 10 * time.Second
	DefaultConnectTimeout    = 2 * time.Second
	DefaultHeaderTimeout     = 5 * time.Minute
	DefaultRetries           = 2
	DefaultFirstTokenTimeout = 5 * time.Minute
	DefaultStreamIdleTimeout = 2 * time.Minute
	DefaultResumeAttempts    = 1
	DefaultResumeBuffer      = 1 << 20

	DefaultHealthPath            = "/health"
	DefaultHealthInterval        = 5 * time.Second
	DefaultHealthTimeout         = time.Second
	DefaultUnhealthyAfter        = 3
	DefaultHealthyAfter          = 2
	DefaultConsecutive5xx        = 5
	DefaultConsecutiveConnect    = 3
	DefaultMaxEjectionPercent    = 50
	DefaultBaseEjection          = 5 * time.Second
	DefaultMaxEjection           = 2 * time.Minute
	DefaultScrapePath            = "/metrics"
	DefaultScrapeInterval        = 50 * time.Millisecond
	DefaultScrapeTimeout         = 200 * time.Millisecond
	DefaultScrapeStaleness       = 500 * time.Millisecond
	DefaultAffinityDepth         = 2
	DefaultAffinityLoadFactor    = 1.25
	DefaultMaxInputChars         = 4000
	DefaultClassifierTimeout     = 300 * time.Millisecond
	DefaultClassifierConcurrency = 64
	DefaultBreakerFailures       = 5
	DefaultBreakerCooldown       = 10 * time.Second
	DefaultCacheSize             = 50000
	DefaultCacheTTL              = 10 * time.Minute
	DefaultSessionTTL            = 30 * time.Minute
	DefaultSessionSize           = 100000
	DefaultShareWindow           = 2 * time.Minute
	DefaultShareUtilization      = 0.8
	DefaultMemoryUtilization     = 0.9
)

// The sections as they are before the file is read.
var (
	DefaultServer = Server{
		Listen: DefaultListen, AdminListen: DefaultAdminListen, MaxBodyBytes: DefaultMaxBodyBytes,
		ShutdownGrace: Duration(DefaultShutdownGrace), DrainDelay: Duration(DefaultDrainDelay), Instances: 1,
		ReadHeaderTimeout: Duration(DefaultReadHeaderTimeout), IdleTimeout: Duration(DefaultIdleTimeout),
		MaxJSONDepth: DefaultMaxJSONDepth, BodyTimeout: Duration(DefaultBodyTimeout),
		WriteTimeout: Duration(DefaultWriteTimeout), AdminMaxConnections: DefaultAdminMaxConns,
	}
	DefaultPool = Pool{
		Balance: DefaultBalance, QueueTimeout: Duration(DefaultQueueTimeout), ShareReserve: Duration(DefaultShareReserve),
		ConnectTimeout: Duration(DefaultConnectTimeout), ResponseHeaderTimeout: Duration(DefaultHeaderTimeout),
		FirstTokenTimeout: Duration(DefaultFirstTokenTimeout), StreamIdleTimeout: Duration(DefaultStreamIdleTimeout),
		Retries: DefaultRetries, Health: DefaultHealth, Outlier: DefaultOutlier, Resume: DefaultResume,
		Scrape: DefaultScrape, Affinity: DefaultAffinity,
	}
	DefaultHealth = Health{
		Path: DefaultHealthPath, Interval: Duration(DefaultHealthInterval), Timeout: Duration(DefaultHealthTimeout),
		UnhealthyAfter: DefaultUnhealthyAfter, HealthyAfter: DefaultHealthyAfter,
	}
	DefaultOutlier = Outlier{
		Consecutive5xx: DefaultConsecutive5xx, ConsecutiveConnectFailures: DefaultConsecutiveConnect,
		MaxEjectionPercent: DefaultMaxEjectionPercent, BaseEjection: Duration(DefaultBaseEjection),
		MaxEjection: Duration(DefaultMaxEjection),
	}
	DefaultResume    = Resume{MaxAttempts: DefaultResumeAttempts, MaxBuffer: DefaultResumeBuffer}
	DefaultScrape    = Scrape{Path: DefaultScrapePath, Interval: Duration(DefaultScrapeInterval), Timeout: Duration(DefaultScrapeTimeout), Staleness: Duration(DefaultScrapeStaleness)}
	DefaultAffinity  = Affinity{Depth: DefaultAffinityDepth, LoadFactor: DefaultAffinityLoadFactor}
	DefaultDiscovery = Discovery{Interval: Duration(DefaultDiscoveryInterval)}
	DefaultTopology  = Topology{MemoryUtilization: DefaultMemoryUtilization}

	DefaultClassifier = Classifier{
		MaxInputChars: DefaultMaxInputChars, Timeout: Duration(DefaultClassifierTimeout),
		Concurrency: DefaultClassifierConcurrency, Cache: DefaultCache, Breaker: DefaultBreaker,
	}
	DefaultCache        = Cache{Size: DefaultCacheSize, TTL: Duration(DefaultCacheTTL)}
	DefaultBreaker      = Breaker{Failures: DefaultBreakerFailures, Cooldown: Duration(DefaultBreakerCooldown)}
	DefaultCapture      = Capture{MaxFileSize: 64 << 20, MaxFiles: 10}
	DefaultSession      = Session{TTL: Duration(DefaultSessionTTL), Size: DefaultSessionSize, Implicit: true, MoveDown: MoveDownNewInstruction}
	DefaultShareControl = ShareControl{Window: Duration(DefaultShareWindow), Utilization: DefaultShareUtilization}
	DefaultRoute        = Route{Sticky: true}
)

// defaultConfig is a config before its file is read.
func defaultConfig(file string) *Config {
	return &Config{File: file, Server: DefaultServer, Models: []Model{{Name: "auto", Route: "policy"}}}
}

// The UnmarshalYAML methods below implement yaml.InterfaceUnmarshaler:
// they write the section's defaults, then decode the file's keys over them.
// Decoding into the plain type (no methods) stops the recursion.

func (s *Server) UnmarshalYAML(unmarshal func(any) error) error {
	*s = DefaultServer
	type plain Server
	return unmarshal((*plain)(s))
}

// UnmarshalYAML: an API key's default allows every model with weight 1.
func (k *APIKey) UnmarshalYAML(unmarshal func(any) error) error {
	*k = APIKey{Models: StringList{"*"}, Weight: 1}
	type plain APIKey
	return unmarshal((*plain)(k))
}

func (r *Route) UnmarshalYAML(unmarshal func(any) error) error {
	*r = DefaultRoute
	type plain Route
	return unmarshal((*plain)(r))
}

func (t *Topology) UnmarshalYAML(unmarshal func(any) error) error {
	*t = DefaultTopology
	type plain Topology
	return unmarshal((*plain)(t))
}

// UnmarshalYAML keeps the pool's name (the key it is listed under) and
// names each unnamed replica POOL-INDEX.
func (p *Pool) UnmarshalYAML(unmarshal func(any) error) error {
	name := p.Name
	*p = DefaultPool
	p.Name = name
	type plain Pool
	if err := unmarshal((*plain)(p)); err != nil {
		return err
	}
	for i, r := range p.Replicas {
		if r != nil && r.Name == "" {
			r.Name = defaultReplicaName(name, i)
		}
	}
	return nil
}

func defaultReplicaName(pool string, i int) string { return fmt.Sprintf("%s-%d", pool, i) }

func (h *Health) UnmarshalYAML(unmarshal func(any) error) error {
	*h = DefaultHealth
	type plain Health
	return unmarshal((*plain)(h))
}

// UnmarshalYAML: max_ejection, when not given, is the larger of its default
// and base_ejection, so that a long base_ejection alone is not an error.
func (o *Outlier) UnmarshalYAML(unmarshal func(any) error) error {
	*o = DefaultOutlier
	type plain Outlier
	if err := unmarshal((*plain)(o)); err != nil {
		return err
	}
	var given struct {
		MaxEjection *Duration `yaml:"max_ejection"`
	}
	if err := unmarshal(&given); err != nil {
		return err
	}
	if given.MaxEjection == nil {
		o.MaxEjection = max(o.MaxEjection, o.BaseEjection)
	}
	return nil
}

func (r *Resume) UnmarshalYAML(unmarshal func(any) error) error {
	*r = DefaultResume
	type plain Resume
	return unmarshal((*plain)(r))
}

func (s *Scrape) UnmarshalYAML(unmarshal func(any) error) error {
	*s = DefaultScrape
	type plain Scrape
	return unmarshal((*plain)(s))
}

func (a *Affinity) UnmarshalYAML(unmarshal func(any) error) error {
	*a = DefaultAffinity
	type plain Affinity
	return unmarshal((*plain)(a))
}

func (d *Discovery) UnmarshalYAML(unmarshal func(any) error) error {
	*d = DefaultDiscovery
	type plain Discovery
	return unmarshal((*plain)(d))
}

// UnmarshalYAML also splits the labels into names and descriptions, and
// makes on_error, when not given, the last label.
func (c *Classifier) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultClassifier
	type plain Classifier
	if err := unmarshal((*plain)(c)); err != nil {
		return err
	}
	for _, l := range c.RawLabels {
		c.Labels = append(c.Labels, l.Name)
		if l.Description != "" {
			if c.Descriptions == nil {
				c.Descriptions = map[string]string{}
			}
			c.Descriptions[l.Name] = l.Description
		}
	}
	if c.OnError == "" && len(c.Labels) > 0 {
		c.OnError = c.Labels[len(c.Labels)-1]
	}
	return nil
}

func (c *Cache) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultCache
	type plain Cache
	return unmarshal((*plain)(c))
}

func (b *Breaker) UnmarshalYAML(unmarshal func(any) error) error {
	*b = DefaultBreaker
	type plain Breaker
	return unmarshal((*plain)(b))
}

func (c *Capture) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultCapture
	type plain Capture
	return unmarshal((*plain)(c))
}

func (s *Session) UnmarshalYAML(unmarshal func(any) error) error {
	*s = DefaultSession
	type plain Session
	return unmarshal((*plain)(s))
}

func (s *ShareControl) UnmarshalYAML(unmarshal func(any) error) error {
	*s = DefaultShareControl
	type plain ShareControl
	return unmarshal((*plain)(s))
}
