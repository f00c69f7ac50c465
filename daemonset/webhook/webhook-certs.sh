#!/usr/bin/env bash
# Certificates of the admission webhook at install, without cert-manager (docs/security.md, "Install").
#
#   daemonset/webhook/webhook-certs.sh [--namespace NS] [--days N] [--output DIR] [--no-kubectl] [--rotate]
#
# Makes a private CA and a serving certificate for tidemark-webhook.<NS>.svc (ECDSA P-256, openssl),
# then, with kubectl's current context: creates or replaces the Secret tidemark-webhook-tls in NS (tls.crt,
# tls.key and the CA's ca.crt) and patches the CA into the caBundle of both webhook configurations
# (tidemark-admission). Run it after `kubectl apply -k daemonset/`. Run again (a re-install after an
# uninstall that kept the Secret), it keeps a Secret whose certificate is for this service, chains to its
# ca.crt and is valid for 30 more days, and only patches that CA into the configurations: the webhook pods,
# already started on that Secret, keep serving a certificate the API server trusts. Before, every run made
# a new CA, and pods started before it served the old certificate to a caBundle of the new CA (x509:
# unknown authority) until restarted: the agents could not publish. --rotate makes a new one regardless.
# Whenever it replaces an existing Secret it restarts the webhook's pods (`rollout restart`), which load a
# certificate only at start. The CA key never leaves DIR (a temporary directory, removed at exit, unless
# --output names one). --no-kubectl only writes the files.
set -euo pipefail

ns=tidemark-system
days=825
out=""
use_kubectl=1
rotate=0
while (($#)); do
  case "$1" in
    --namespace) ns=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    --output) out=$2; shift 2 ;;
    --no-kubectl) use_kubectl=0; shift ;;
    --rotate) rotate=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
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
svc="tidemark-webhook.$ns.svc"

patch_ca_bundle() {  # $1: the CA certificate file
  local ca count patch kind
  ca=$(base64 <"$1" | tr -d '\n')
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    count=$(kubectl get "$kind" tidemark-admission -o jsonpath='{range .webhooks[*]}x{end}')
    patch=$(for ((i = 0; i < ${#count}; i++)); do
      printf '{"op":"add","path":"/webhooks/%d/clientConfig/caBundle","value":"%s"}\n' "$i" "$ca"
    done | paste -sd, -)
    kubectl patch "$kind" tidemark-admission --type=json -p "[$patch]"
  done
}

existed=0
if ((use_kubectl)) && kubectl -n "$ns" get secret tidemark-webhook-tls >/dev/null 2>&1; then
  existed=1
  if ((!rotate)); then
    # the Secret kept from an earlier install: reused when its certificate is for this service, chains to its
    # ca.crt and is valid for 30 more days
    for key in ca.crt tls.crt; do
      kubectl -n "$ns" get secret tidemark-webhook-tls -o "jsonpath={.data.${key//./\\.}}" | base64 -d >"$out/kept-$key" 2>/dev/null || true
    done
    if [[ -s "$out/kept-ca.crt" && -s "$out/kept-tls.crt" ]] &&
      openssl verify -CAfile "$out/kept-ca.crt" "$out/kept-tls.crt" >/dev/null 2>&1 &&
      openssl x509 -in "$out/kept-tls.crt" -noout -checkend $((30 * 86400)) >/dev/null 2>&1 &&
      openssl x509 -in "$out/kept-tls.crt" -noout -text 2>/dev/null | grep -q "DNS:$svc"; then
      patch_ca_bundle "$out/kept-ca.crt"
      echo "webhook-certs.sh: kept the Secret $ns/tidemark-webhook-tls (valid, for $svc); the caBundle of tidemark-admission is its CA (--rotate makes a new one)" >&2
      exit 0
    fi
  fi
fi

# the keys are new files, never a rewrite of one already there (whose mode or link would be kept)
rm -f "$out/ca.key" "$out/tls.key"
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
kubectl -n "$ns" create secret generic tidemark-webhook-tls --type=kubernetes.io/tls --from-file=tls.crt="$out/tls.crt" \
  --from-file=tls.key="$out/tls.key" --from-file=ca.crt="$out/ca.crt" --dry-run=client -o yaml | kubectl apply -f -
patch_ca_bundle "$out/ca.crt"
echo "webhook-certs.sh: Secret $ns/tidemark-webhook-tls and the caBundle of tidemark-admission are set" >&2
if ((existed)) && kubectl -n "$ns" get deployment tidemark-webhook >/dev/null 2>&1; then
  # pods started on the replaced Secret serve its old certificate until they restart. What `rollout restart`
  # writes, with nanoseconds: kubectl's own stamp has whole seconds, and a second restart within the same second
  # is an empty patch that kubectl refuses ("failed to create patch"), which failed this script (a CI run).
  stamp=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  kubectl -n "$ns" patch deployment tidemark-webhook --type=merge \
    -p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"kubectl.kubernetes.io/restartedAt\":\"$stamp\"}}}}}"
  echo "webhook-certs.sh: the webhook's pods restart to load the new certificate" >&2
fi
