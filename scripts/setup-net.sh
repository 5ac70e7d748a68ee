#!/usr/bin/env bash
# What networked sandboxes (network_enabled = true) need on the host, idempotently: the
# nftables and iproute2 tools, and IPv4 and IPv6 forwarding (the sandboxes' traffic is routed
# and NATed out; every networked sandbox has an IPv4 and an IPv6 address). Safe to run again. Warden itself creates its nftables table `inet warden` on first use
# and never touches other tables; with Docker present it adds two ACCEPT rules for its `wdsb+`
# interfaces to Docker's DOCKER-USER chain (Docker's FORWARD policy is DROP).
set -euo pipefail

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in nftables iproute2 iptables; do
  have "$pkg" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-net: missing Debian packages ${need[*]}; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# IPv4 forwarding: needed for any routed sandbox traffic. Note: this makes the host route
# between all its interfaces; Warden's own rules only cover its sandboxes' interfaces.
if [ "$(cat /proc/sys/net/ipv4/ip_forward)" != 1 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup-net: enabling net.ipv4.ip_forward" >&2
    sysctl -q -w net.ipv4.ip_forward=1
  else
    echo "setup-net: net.ipv4.ip_forward is 0; networked sandboxes will be refused" >&2
  fi
fi

# IPv6 forwarding: the same for the sandboxes' IPv6 traffic (NAT66 out of the host). Note: with
# forwarding on, the kernel stops accepting router advertisements on interfaces whose
# accept_ra is 1 (a host that configures its IPv6 address or default route by SLAAC needs
# accept_ra = 2 on that interface first).
if [ "$(cat /proc/sys/net/ipv6/conf/all/forwarding)" != 1 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup-net: enabling net.ipv6.conf.all.forwarding" >&2
    sysctl -q -w net.ipv6.conf.all.forwarding=1
  else
    echo "setup-net: net.ipv6.conf.all.forwarding is 0; networked sandboxes will be refused" >&2
  fi
fi
