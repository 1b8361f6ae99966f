#!/bin/sh
set -eu
until curl -sk https://192.168.56.10:6443/healthz >/dev/null; do sleep 5; done
kubeadm join 192.168.56.10:6443 --token=abcdef.0123456789abcdef --discovery-token-unsafe-skip-ca-verification
