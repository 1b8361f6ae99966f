package app

// Blank imports keep go.mod/go.sum complete while the packages that use
// these modules are being written.
import (
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/haproxytech/client-native/v6/config-parser"
	_ "github.com/haproxytech/client-native/v6/config-parser/types"
	_ "github.com/haproxytech/client-native/v6/runtime"
	_ "github.com/haproxytech/client-native/v6/runtime/options"
	_ "github.com/osrg/gobgp/v3/api"
	_ "github.com/osrg/gobgp/v3/pkg/apiutil"
	_ "github.com/osrg/gobgp/v3/pkg/packet/bgp"
	_ "github.com/osrg/gobgp/v3/pkg/server"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "k8s.io/apimachinery/pkg/util/yaml"
	_ "k8s.io/client-go/discovery"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/dynamic/dynamicinformer"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/tools/leaderelection/resourcelock"
	_ "k8s.io/client-go/tools/record"
	_ "sigs.k8s.io/yaml"
)
