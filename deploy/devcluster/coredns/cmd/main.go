// coredns is CoreDNS with only the plugins the dev cluster's Corefile uses (bind, errors, cache,
// kubernetes), the way CoreDNS documents custom builds: the full binary compiles every cloud provider's
// SDK, which tripled the cold build on two cores for nothing the dev cluster needs.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

// The order plugins run in, as in CoreDNS's plugin.cfg (a subset of it).
var directives = []string{"bind", "errors", "cache", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
