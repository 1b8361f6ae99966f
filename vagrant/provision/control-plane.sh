#!/bin/sh
# kubeadm control plane, Calico in BGP mode without encapsulation, the demo
# app, and a kubeconfig for the edge bound to perimeter's ClusterRole.
set -eu
CALICO=$2
NODE_IP=$3
kubeadm init --apiserver-advertise-address="$NODE_IP" --pod-network-cidr=10.244.0.0/16 --token=abcdef.0123456789abcdef
export KUBECONFIG=/etc/kubernetes/admin.conf
kubectl taint nodes --all node-role.kubernetes.io/control-plane- || true
kubectl create -f "https://raw.githubusercontent.com/projectcalico/calico/$CALICO/manifests/tigera-operator.yaml"
kubectl create -f - <<'YAML'
apiVersion: operator.tigera.io/v1
kind: Installation
metadata: {name: default}
spec:
  calicoNetwork:
    bgp: Enabled
    ipPools: [{cidr: 10.244.0.0/16, blockSize: 26, encapsulation: None, natOutgoing: Enabled, nodeSelector: all()}]
YAML
# The edge is a BGP peer of every node (Calico side).
until kubectl get crd bgppeers.crd.projectcalico.org >/dev/null 2>&1; do sleep 5; done
kubectl apply -f - <<'YAML'
apiVersion: crd.projectcalico.org/v1
kind: BGPPeer
metadata: {name: perimeter-edge}
spec: {peerIP: 192.168.56.20, asNumber: 64512}
YAML
kubectl apply -f /perimeter/packaging/rbac.yaml
kubectl apply -f /perimeter/vagrant/demo.yaml
# A client certificate for User "perimeter", signed by the cluster CA.
cd /tmp
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout perimeter.key -subj /CN=perimeter -out perimeter.csr
openssl x509 -req -in perimeter.csr -CA /etc/kubernetes/pki/ca.crt -CAkey /etc/kubernetes/pki/ca.key -CAcreateserial -days 365 -out perimeter.crt
KUBECONFIG=/perimeter/vagrant/.edge.kubeconfig kubectl config set-cluster lab --server="https://$NODE_IP:6443" --certificate-authority=/etc/kubernetes/pki/ca.crt --embed-certs
KUBECONFIG=/perimeter/vagrant/.edge.kubeconfig kubectl config set-credentials perimeter --client-certificate=perimeter.crt --client-key=perimeter.key --embed-certs
KUBECONFIG=/perimeter/vagrant/.edge.kubeconfig kubectl config set-context lab --cluster=lab --user=perimeter
KUBECONFIG=/perimeter/vagrant/.edge.kubeconfig kubectl config use-context lab
