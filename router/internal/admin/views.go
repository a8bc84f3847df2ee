package admin

import (
	"crypto/sha256"
	"time"
)

// ReplicaView is a replica as /admin/pools and the status page show it.
type ReplicaView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Source is where the replica came from: config (listed), dns or srv
	// (discovered).
	Source string   `json:"source"`
	Nodes  []string `json:"nodes,omitempty"`
	// State is one word for the replica: probing (new, no probe passed
	// yet), healthy, unhealthy, ejected, misconfigured or draining
	// (removed by a reload, finishing its requests).
	State   string `json:"state"`
	Healthy bool   `json:"healthy"`
	Ejected bool   `json:"ejected"`
	// Misconfigured: the server refused the pool's key or does not serve
	// the pool's model (why says which).
	Misconfigured bool   `json:"misconfigured"`
	Why           string `json:"why,omitempty"`
	// Inflight counts requests on the server over every pool listing it;
	// Waiting those queued for one of its slots.
	Inflight   int64    `json:"inflight"`
	Waiting    int64    `json:"waiting"`
	Queue      *float64 `json:"queue,omitempty"`
	Running    *float64 `json:"running,omitempty"`
	KVUsage    *float64 `json:"kv_cache_usage,omitempty"`
	LastScrape string   `json:"last_scrape,omitempty"`
	ScrapeErr  string   `json:"scrape_error,omitempty"`
	Missing    []string `json:"missing_signals,omitempty"`
	Ejections  int64    `json:"ejections"`
	// EjectedUntil, while ejected, is when the ejection ends.
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	// Recent is the replica's outcomes over the last minute, as the
	// gateway saw them (its requests, error rate, time to first token).
	Recent ReplicaStats `json:"recent"`
}

// PoolView is a pool as /admin/pools and the status page show it.
type PoolView struct {
	Name        string        `json:"name"`
	Model       string        `json:"model"`
	Balance     string        `json:"balance"`
	MaxInflight int           `json:"max_inflight"`
	Healthy     int           `json:"healthy_replicas"`
	Replicas    []ReplicaView `json:"replicas"`
	// Discovery is set for a pool whose replicas come from DNS.
	Discovery *DiscoveryView `json:"discovery,omitempty"`
}

// ReplicaFlags are the facts about a replica that State weighs.
type ReplicaFlags struct {
	Retired, Probing, Misconfigured, Ejected, Healthy bool
}

// State is the one word /admin/pools shows for a replica, the most
// telling first.
func (f ReplicaFlags) State() string {
	switch {
	case f.Retired:
		return "draining"
	case f.Probing:
		return "probing"
	case f.Misconfigured:
		return "misconfigured"
	case f.Ejected:
		return "ejected"
	case !f.Healthy:
		return "unhealthy"
	}
	return "healthy"
}

// Replica is a replica as the status page's memory keys its outcomes
// (a *pools.Endpoint): one gone and idle is forgotten.
type Replica interface {
	Retired() bool
	Inflight() int64
}

// Running is what the admin API reads of the running config, as plain
// values the gateway fills in from its snapshot.
type Running struct {
	Generation int64
	// Token is the SHA-256 of server.admin_token, which guards /admin/*
	// (and /metrics with TokenMetrics); nil without a token.
	Token        *[sha256.Size]byte
	TokenMetrics bool
	AdminListen  string
	// Classifier is the classifier's kind, empty without one.
	Classifier string
	// Topology is the config's topology, shown by /admin/pools; nil
	// without one.
	Topology any
}

// DiscoveryView is a discovered pool's part of /admin/pools.
type DiscoveryView struct {
	Kind        string   `json:"kind"`
	Name        string   `json:"name"`
	Resolver    string   `json:"resolver,omitempty"`
	Interval    string   `json:"interval,omitempty"`
	Addresses   []string `json:"addresses"`
	LastResolve string   `json:"last_resolved,omitempty"`
	LastAttempt string   `json:"last_attempt,omitempty"`
	Result      string   `json:"result,omitempty"`
	Error       string   `json:"error,omitempty"`
	TTL         string   `json:"ttl,omitempty"`
}

// ShadowSummary is /admin/shadow's answer.
type ShadowSummary struct {
	Enabled    bool   `json:"enabled"`
	File       string `json:"file,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	Decisions  int64  `json:"decisions"`
	// Skipped are requests not evaluated because 64 shadow decisions were
	// already waiting on the classifier.
	Skipped   int64              `json:"skipped"`
	Agreement float64            `json:"agreement"`
	LiveSplit map[string]float64 `json:"live_split,omitempty"`
	Split     map[string]float64 `json:"shadow_split,omitempty"`
	Pairs     []ShadowPair       `json:"pairs,omitempty"`
	Routes    []ShadowPair       `json:"routes,omitempty"`
}

// ShadowPair counts the requests decided live one way and shadow another.
type ShadowPair struct {
	Live   string `json:"live"`
	Shadow string `json:"shadow"`
	Count  int64  `json:"count"`
}

// ReloadOutcome is what the last reload came to, for the status page.
type ReloadOutcome struct {
	At         time.Time `json:"at"`
	OK         bool      `json:"ok"`
	Generation int64     `json:"generation,omitempty"`
	Error      string    `json:"error,omitempty"`
}
