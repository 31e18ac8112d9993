#!/usr/bin/env bash
# etcd.sh: the one-node etcd (Debian's etcd-server) the example Patroni nodes keep their leader key in.
#
#   deploy/patroni/etcd.sh [DATA_DIR]    DATA_DIR defaults to /var/lib/styx-patroni/etcd
#
# Client URL http://127.0.0.1:12379 (what node1.yml and node2.yml name), peer URL :12380; ETCD_CLIENT_PORT and
# ETCD_PEER_PORT override them. One etcd node is no quorum: it is the example's single point of failure.
# In production run three (or five) on separate hosts and list them all in each node's etcd3.hosts.
set -euo pipefail
dir=${1:-/var/lib/styx-patroni/etcd}
client=http://127.0.0.1:${ETCD_CLIENT_PORT:-12379}
peer=http://127.0.0.1:${ETCD_PEER_PORT:-12380}
exec etcd --name styx-etcd --data-dir "$dir" \
	--listen-client-urls "$client" --advertise-client-urls "$client" \
	--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
	--initial-cluster "styx-etcd=$peer" --initial-cluster-state new
