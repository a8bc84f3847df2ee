// Package dnstest is a DNS server on loopback for tests, as net/http/httptest
// is an HTTP one: its zone is replaced while it runs, it can stop answering
// or answer SERVFAIL, and it counts the queries it gets.
package dnstest

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// Mode is how the server treats queries.
type Mode int32

const (
	// Answer serves the zone.
	Answer Mode = iota
	// ServFail answers every query SERVFAIL.
	ServFail
	// Silent drops every query (a resolver that is down).
	Silent
)

// Server serves a zone over UDP and TCP on one 127.0.0.1 port.
type Server struct {
	// Addr is the server's IP:PORT.
	Addr string

	mode    atomic.Int32
	queries atomic.Int64
	// UDPMax truncates UDP answers with more records than this (0: none),
	// so that clients must ask again over TCP.
	udpMax atomic.Int32
	// noExtra leaves SRV answers without their targets' addresses.
	noExtra atomic.Bool

	mu   sync.Mutex
	zone []dns.RR
}

// New starts a server with an empty zone; it stops when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("dnstest: no port free for both UDP and TCP")
	}
	s.Addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve)}
	tcp := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(s.serve)}
	var started sync.WaitGroup
	for _, srv := range []*dns.Server{udp, tcp} {
		started.Add(1)
		srv.NotifyStartedFunc = started.Done
		go func() { _ = srv.ActivateAndServe() }()
	}
	started.Wait()
	t.Cleanup(func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
	})
	return s
}

// Zone replaces the zone with records in zone-file syntax
// ("vllm.test. 5 IN A 127.0.0.2"). It panics on a bad record.
func (s *Server) Zone(records ...string) {
	var rrs []dns.RR
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			panic("dnstest: " + err.Error())
		}
		rrs = append(rrs, rr)
	}
	s.mu.Lock()
	s.zone = rrs
	s.mu.Unlock()
}

// SetMode switches how queries are treated from now on.
func (s *Server) SetMode(m Mode) { s.mode.Store(int32(m)) }

// TruncateUDP makes UDP answers with more than n records truncated.
func (s *Server) TruncateUDP(n int) { s.udpMax.Store(int32(n)) }

// OmitAdditional leaves SRV answers without the targets' addresses, so
// that clients must resolve each target.
func (s *Server) OmitAdditional(omit bool) { s.noExtra.Store(omit) }

// Queries is how many queries arrived (answered or not).
func (s *Server) Queries() int64 { return s.queries.Load() }

func (s *Server) serve(w dns.ResponseWriter, q *dns.Msg) {
	s.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(q)
	switch Mode(s.mode.Load()) {
	case Silent:
		return
	case ServFail:
		m.Rcode = dns.RcodeServerFailure
		_ = w.WriteMsg(m)
		return
	}
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	qq := q.Question[0]
	s.mu.Lock()
	zone := s.zone
	s.mu.Unlock()
	name, exists := qq.Name, false
	for hops := 0; hops < 8; hops++ {
		next := ""
		for _, rr := range zone {
			h := rr.Header()
			if !strings.EqualFold(h.Name, name) {
				continue
			}
			exists = true
			if h.Rrtype == qq.Qtype {
				m.Answer = append(m.Answer, rr)
			} else if c, ok := rr.(*dns.CNAME); ok {
				m.Answer = append(m.Answer, rr)
				next = c.Target
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	if !exists {
		m.Rcode = dns.RcodeNameError
	}
	if qq.Qtype == dns.TypeSRV && !s.noExtra.Load() {
		for _, a := range m.Answer {
			srv, ok := a.(*dns.SRV)
			if !ok {
				continue
			}
			for _, rr := range zone {
				if h := rr.Header(); strings.EqualFold(h.Name, srv.Target) && (h.Rrtype == dns.TypeA || h.Rrtype == dns.TypeAAAA) {
					m.Extra = append(m.Extra, rr)
				}
			}
		}
	}
	if n := int(s.udpMax.Load()); n > 0 && len(m.Answer) > n && w.LocalAddr().Network() == "udp" {
		m.Answer, m.Extra, m.Truncated = nil, nil, true
	}
	_ = w.WriteMsg(m)
}
