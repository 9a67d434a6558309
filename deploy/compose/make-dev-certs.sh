#!/usr/bin/env bash
# Development certificates for docker-compose.tls.yaml (and the Kubernetes
# overlay's gpufair-tls Secret): a throw-away CA and one server certificate
# whose names cover every way gpufair's services are dialled.
# Usage: ./make-dev-certs.sh [OUT_DIR] [NAMESPACE]   (defaults: ./certs gpufair)
# Production: issue these from your own CA (e.g. cert-manager); never commit keys.
set -euo pipefail
out="${1:-$(dirname "$0")/certs}"
ns="${2:-gpufair}"
mkdir -p "$out"
cd "$out"
sans="DNS:localhost,IP:127.0.0.1"
for svc in metrics scheduler cache gpufair-metrics gpufair-scheduler gpufair-cache; do
  sans="$sans,DNS:$svc,DNS:$svc.$ns,DNS:$svc.$ns.svc,DNS:$svc.$ns.svc.cluster.local"
done
openssl req -x509 -newkey rsa:3072 -nodes -days 365 -subj "/CN=gpufair dev CA" \
  -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=gpufair" \
  -keyout server-key.pem -out server.csr 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 365 \
  -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
# Compose bind-mounts secret files with their host permissions: uid 10001 in the
# containers must be able to read the key.
chmod 0644 server-key.pem
echo "wrote $out/{ca.pem,server.pem,server-key.pem} (CA key: $out/ca-key.pem, keep it out of git)"
