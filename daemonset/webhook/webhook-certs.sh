#!/usr/bin/env bash
# Certificates of the admission webhook at install, without cert-manager (docs/security.md, "Install").
#
#   daemonset/webhook/webhook-certs.sh [--namespace NS] [--days N] [--output DIR] [--no-kubectl]
#
# Makes a private CA and a serving certificate for tidemark-webhook.<NS>.svc (ECDSA P-256, openssl),
# then, with kubectl's current context: creates or replaces the Secret tidemark-webhook-tls in NS and
# patches the CA into the caBundle of both webhook configurations (tidemark-admission). Run it after
# `kubectl apply -k daemonset/`, and again to rotate (the webhook pods pick the new Secret up on restart:
# `kubectl -n NS rollout restart deployment/tidemark-webhook`). The CA key never leaves DIR (a temporary
# directory, removed at exit, unless --output names one). --no-kubectl only writes the files.
set -euo pipefail

ns=tidemark-system
days=825
out=""
use_kubectl=1
while (($#)); do
  case "$1" in
    --namespace) ns=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    --output) out=$2; shift 2 ;;
    --no-kubectl) use_kubectl=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "webhook-certs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "webhook-certs.sh: openssl is required" >&2; exit 2; }
# Everything this script creates is its owner's alone (keys 0600, directories 0700); it changes the
# mode of nothing it did not create: an existing --output directory keeps its mode and its other files.
umask 077
if [[ -z "$out" ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
[[ -d "$out" ]] || mkdir -p "$out"
# the keys are new files, never a rewrite of one already there (whose mode or link would be kept)
rm -f "$out/ca.key" "$out/tls.key"
svc="tidemark-webhook.$ns.svc"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

openssl req -x509 "${ec[@]}" -keyout "$out/ca.key" -out "$out/ca.crt" -days "$days" \
  -subj "/CN=tidemark-webhook-ca" 2>/dev/null
openssl req "${ec[@]}" -keyout "$out/tls.key" -out "$out/tls.csr" -subj "/CN=$svc" 2>/dev/null
printf 'subjectAltName=DNS:tidemark-webhook,DNS:tidemark-webhook.%s,DNS:%s,DNS:%s.cluster.local\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n' \
  "$ns" "$svc" "$svc" >"$out/ext.cnf"
openssl x509 -req -in "$out/tls.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
  -out "$out/tls.crt" -days "$days" -extfile "$out/ext.cnf" 2>/dev/null
echo "webhook-certs.sh: certificate for $svc (valid $days days) in $out" >&2

((use_kubectl)) || exit 0
kubectl -n "$ns" create secret tls tidemark-webhook-tls --cert="$out/tls.crt" --key="$out/tls.key" \
  --dry-run=client -o yaml | kubectl apply -f -
ca=$(base64 <"$out/ca.crt" | tr -d '\n')
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
  count=$(kubectl get "$kind" tidemark-admission -o jsonpath='{range .webhooks[*]}x{end}')
  patch=$(for ((i = 0; i < ${#count}; i++)); do
    printf '{"op":"add","path":"/webhooks/%d/clientConfig/caBundle","value":"%s"}\n' "$i" "$ca"
  done | paste -sd, -)
  kubectl patch "$kind" tidemark-admission --type=json -p "[$patch]"
done
echo "webhook-certs.sh: Secret $ns/tidemark-webhook-tls and the caBundle of tidemark-admission are set" >&2
