package pools

// NewDNSLookupVia is NewDNSLookup for the system resolver with its
// servers replaced by servers (resolv.conf cannot name a port).
func NewDNSLookupVia(resolvConf string, servers ...string) (*DNSLookup, error) {
	l, err := NewDNSLookup("", resolvConf)
	if err != nil {
		return nil, err
	}
	l.servers = servers
	return l, nil
}
