package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// DNSLookup answers discovery queries with a DNS client of its own (the
// standard library's resolver does not expose TTLs). It asks its servers
// in order until one answers; a truncated UDP answer is asked again over
// TCP.
type DNSLookup struct {
	servers []string
	// conf is the resolv.conf the servers came from (its search list and
	// ndots expand relative names); nil for an explicit resolver, whose
	// names are taken as fully qualified.
	conf *dns.ClientConfig
}

var _ Lookup = (*DNSLookup)(nil)

// NewDNSLookup returns a lookup asking server (IP:PORT), or with server ""
// the nameservers of resolvConf (/etc/resolv.conf) with its search list
// and ndots.
func NewDNSLookup(server, resolvConf string) (*DNSLookup, error) {
	if server != "" {
		return &DNSLookup{servers: []string{server}}, nil
	}
	conf, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("system resolver: %w", err)
	}
	if len(conf.Servers) == 0 {
		return nil, fmt.Errorf("system resolver: %s lists no nameserver", resolvConf)
	}
	l := &DNSLookup{conf: conf}
	for _, s := range conf.Servers {
		l.servers = append(l.servers, net.JoinHostPort(s, conf.Port))
	}
	return l, nil
}

// Servers are the servers asked, in order.
func (l *DNSLookup) Servers() []string { return l.servers }

func (l *DNSLookup) names(name string) []string {
	if l.conf == nil {
		return []string{dns.Fqdn(name)}
	}
	return l.conf.NameList(name)
}

// Lookup implements Lookup. A relative name is tried with each search
// suffix in resolv.conf order; the first that has records is used.
func (l *DNSLookup) Lookup(ctx context.Context, kind, name string, port int) ([]string, time.Duration, error) {
	var lastErr error = ErrNoRecords
	for _, fq := range l.names(name) {
		var addrs []string
		var ttl time.Duration
		var err error
		if kind == "srv" {
			addrs, ttl, err = l.srv(ctx, fq)
		} else {
			var ips []net.IP
			ips, ttl, err = l.addresses(ctx, fq, nil)
			for _, ip := range ips {
				addrs = append(addrs, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
			}
		}
		if err == nil && len(addrs) > 0 {
			return addrs, ttl, nil
		}
		if err != nil && !errors.Is(err, ErrNoRecords) {
			return nil, 0, err // a server that does not answer is not a missing name
		}
		lastErr = err
	}
	return nil, 0, lastErr
}

// addresses returns the A and AAAA records of name (following the CNAMEs
// in the answer) and their smallest TTL. extra holds records already
// known (an SRV answer's additional section); the query is skipped for a
// type they answer.
func (l *DNSLookup) addresses(ctx context.Context, name string, extra []dns.RR) ([]net.IP, time.Duration, error) {
	var ips []net.IP
	ttl := time.Duration(-1)
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		rrs := matching(extra, name, qtype)
		if len(rrs) == 0 {
			msg, err := l.ask(ctx, name, qtype)
			if errors.Is(err, ErrNoRecords) {
				continue
			}
			if err != nil {
				return nil, 0, err
			}
			rrs = msg.Answer
		}
		for _, rr := range rrs {
			switch r := rr.(type) {
			case *dns.A:
				ips = append(ips, r.A)
			case *dns.AAAA:
				ips = append(ips, r.AAAA)
			default:
				if _, cname := rr.(*dns.CNAME); !cname {
					continue
				}
			}
			ttl = minTTL(ttl, rr.Header().Ttl)
		}
	}
	if len(ips) == 0 {
		return nil, 0, fmt.Errorf("%s: %w", strings.TrimSuffix(name, "."), ErrNoRecords)
	}
	return ips, ttl, nil
}

// srv returns the addresses of name's SRV targets with their ports. Every
// target is a replica: priorities and weights are not used (the pool's
// balancer spreads the load).
func (l *DNSLookup) srv(ctx context.Context, name string) ([]string, time.Duration, error) {
	msg, err := l.ask(ctx, name, dns.TypeSRV)
	if err != nil {
		return nil, 0, err
	}
	ttl := time.Duration(-1)
	var addrs []string
	for _, rr := range msg.Answer {
		s, ok := rr.(*dns.SRV)
		if !ok {
			continue
		}
		ttl = minTTL(ttl, s.Hdr.Ttl)
		ips, t, err := l.addresses(ctx, s.Target, msg.Extra)
		if errors.Is(err, ErrNoRecords) {
			continue // a target without addresses is no replica
		}
		if err != nil {
			return nil, 0, err
		}
		ttl = min(ttl, t)
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip.String(), strconv.Itoa(int(s.Port))))
		}
	}
	if len(addrs) == 0 {
		return nil, 0, fmt.Errorf("%s: %w", strings.TrimSuffix(name, "."), ErrNoRecords)
	}
	return addrs, ttl, nil
}

// ask sends one query to the servers in order until one answers. NXDOMAIN
// and an answer without a record of qtype are ErrNoRecords; SERVFAIL,
// REFUSED and silence move on to the next server, and are the error when
// none answers.
func (l *DNSLookup) ask(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.RecursionDesired = true
	var lastErr error
	for _, server := range l.servers {
		msg, err := exchange(ctx, q, server)
		if err != nil {
			lastErr = fmt.Errorf("%s %s: %w", dns.TypeToString[qtype], strings.TrimSuffix(name, "."), err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		switch msg.Rcode {
		case dns.RcodeSuccess:
			for _, rr := range msg.Answer {
				if rr.Header().Rrtype == qtype {
					return msg, nil
				}
			}
			return nil, fmt.Errorf("%s %s: %w", dns.TypeToString[qtype], strings.TrimSuffix(name, "."), ErrNoRecords)
		case dns.RcodeNameError:
			return nil, fmt.Errorf("%s %s: NXDOMAIN: %w", dns.TypeToString[qtype], strings.TrimSuffix(name, "."), ErrNoRecords)
		default:
			lastErr = fmt.Errorf("%s %s: server %s answered %s", dns.TypeToString[qtype], strings.TrimSuffix(name, "."), server, dns.RcodeToString[msg.Rcode])
		}
	}
	return nil, lastErr
}

// exchange asks server over UDP, and over TCP when the answer was
// truncated.
func exchange(ctx context.Context, q *dns.Msg, server string) (*dns.Msg, error) {
	c := &dns.Client{Net: "udp"}
	msg, _, err := c.ExchangeContext(ctx, q, server)
	if err == nil && msg.Truncated {
		c.Net = "tcp"
		msg, _, err = c.ExchangeContext(ctx, q, server)
	}
	return msg, err
}

// matching returns the records of rrs for name of type qtype.
func matching(rrs []dns.RR, name string, qtype uint16) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		if h := rr.Header(); h.Rrtype == qtype && strings.EqualFold(h.Name, name) {
			out = append(out, rr)
		}
	}
	return out
}

func minTTL(cur time.Duration, ttl uint32) time.Duration {
	t := time.Duration(ttl) * time.Second
	if cur < 0 || t < cur {
		return t
	}
	return cur
}

// StdLookup answers discovery queries with the standard library's
// resolver, for systems without a resolv.conf. It knows no TTLs: the pool
// re-resolves every interval.
type StdLookup struct{ Resolver *net.Resolver }

var _ Lookup = StdLookup{}

// Lookup implements Lookup.
func (l StdLookup) Lookup(ctx context.Context, kind, name string, port int) ([]string, time.Duration, error) {
	r := l.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	var addrs []string
	if kind == "srv" {
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, 0, stdErr(err)
		}
		for _, s := range srvs {
			ips, err := r.LookupIPAddr(ctx, s.Target)
			if err != nil {
				if errors.Is(stdErr(err), ErrNoRecords) {
					continue
				}
				return nil, 0, stdErr(err)
			}
			for _, ip := range ips {
				addrs = append(addrs, net.JoinHostPort(ip.IP.String(), strconv.Itoa(int(s.Port))))
			}
		}
	} else {
		ips, err := r.LookupIPAddr(ctx, name)
		if err != nil {
			return nil, 0, stdErr(err)
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip.IP.String(), strconv.Itoa(port)))
		}
	}
	if len(addrs) == 0 {
		return nil, -1, ErrNoRecords
	}
	return addrs, -1, nil
}

// stdErr maps "no such host" to ErrNoRecords.
func stdErr(err error) error {
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return fmt.Errorf("%s: %w", de.Name, ErrNoRecords)
	}
	return err
}
