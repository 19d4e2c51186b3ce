#!/usr/bin/env bash
# Makes a CA, a node certificate and client certificates for trying Strand's TLS
# listeners (SSL, SASL_SSL, mutual TLS) and for its tests. Not for production keys:
# the CA key sits beside the certificates, unencrypted.
#
#   tools/certs.sh DIR [CLIENT...]
#
# DIR/ca.pem, DIR/ca.key          the CA (clients trust ca.pem)
# DIR/node.pem, DIR/node.key      the broker's certificate (chain: node, CA) and key; its
#                                 names: localhost, 127.0.0.1, this host's name, and
#                                 every name in STRAND_CERT_HOSTS (space separated;
#                                 IP addresses allowed)
# DIR/CLIENT.pem, DIR/CLIENT.key  a client certificate with subject CN=CLIENT,OU=clients,O=Strand
#                                 (its principal with the default mapping rules:
#                                 CN=CLIENT,OU=clients,O=Strand)
# DIR/CLIENT.keystore.pem         the key and certificate in one file, for the Java
#                                 client's ssl.keystore.type=PEM
# An existing CA and node certificate in DIR are kept, so running it again adds clients
# under the same CA (remove node.pem to issue a new node certificate).
# Validity: STRAND_CERT_DAYS days (default 825).
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1
shift
days=${STRAND_CERT_DAYS:-825}
command -v openssl >/dev/null || { echo "certs.sh needs openssl (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f "$dir/ca.pem" ]; then
  key "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -sha256 -days "$days" \
    -subj "/O=Strand/CN=Strand test CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.pem" 2>/dev/null
fi

# sign NAME SUBJECT EXTFILE: DIR/NAME.pem (leaf then CA) and DIR/NAME.key
sign() {
  local name=$1 subject=$2 ext=$3
  key "$dir/$name.key"
  openssl req -new -key "$dir/$name.key" -subj "$subject" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
  cat "$dir/$name.crt" "$dir/ca.pem" > "$dir/$name.pem"
  rm -f "$dir/$name.csr" "$dir/$name.crt" "$dir/ca.srl"
}

ext=$(mktemp)
trap 'rm -f "$ext"' EXIT

sans="DNS:localhost,IP:127.0.0.1"
host=$(hostname 2>/dev/null || true)
[ -n "$host" ] && [ "$host" != localhost ] && sans="$sans,DNS:$host"
for h in ${STRAND_CERT_HOSTS:-}; do
  if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then sans="$sans,IP:$h"; else sans="$sans,DNS:$h"; fi
done
cat > "$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans
EOF
[ -f "$dir/node.pem" ] || sign node "/O=Strand/CN=localhost" "$ext"

cat > "$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EOF
for client in "$@"; do
  sign "$client" "/O=Strand/OU=clients/CN=$client" "$ext"
  # PKCS#8 key then the chain: the Java client's PEM keystore.
  openssl pkcs8 -topk8 -nocrypt -in "$dir/$client.key" > "$dir/$client.keystore.pem"
  cat "$dir/$client.pem" >> "$dir/$client.keystore.pem"
done
# Certificates are public; keys (and the keystores holding them) stay owner-only.
for f in "$dir"/*.pem; do
  case $f in *.keystore.pem) ;; *) chmod 644 "$f" ;; esac
done
echo "made in $dir: ca.pem, node.pem/node.key${*:+, and clients: $*}"
