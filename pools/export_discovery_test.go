package pools

// NewDNSLookupVia is NewDNSLookup for the system resolver with its
// servers replaced by server (resolv.conf cannot name a port).
func NewDNSLookupVia(resolvConf, server string) (*DNSLookup, error) {
	l, err := NewDNSLookup("", resolvConf)
	if err != nil {
		return nil, err
	}
	l.servers = []string{server}
	return l, nil
}
