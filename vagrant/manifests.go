// Package vagrant holds the files of the Vagrant lab that Go code shares:
// the Calico objects the cluster is configured with, which `make lab`
// applies too (with its own addresses; see calico/*.yaml for the fields that
// change), and the edge's perimeter.yaml. vagrant_test.go checks them, the
// provisioning scripts and the Vagrantfile.
package vagrant

import "embed"

// Calico is calico/*.yaml: the BGPConfiguration (node mesh, the nodes' AS),
// the IPPool (BGP mode, no IP-in-IP, no VXLAN) and the edge's BGPPeer, one
// object per file, as crd.projectcalico.org/v1 (what Calico itself reads;
// no Calico API server needed).
//
//go:embed calico/*.yaml
var Calico embed.FS

// EdgeConfig is the edge host's /etc/perimeter/perimeter.yaml.
//
//go:embed edge/perimeter.yaml
var EdgeConfig []byte
