#!/usr/bin/env bash
# TLS end to end with certificates made by openssl here: stoker_fetch over
# TLS gets the same epoch as over plaintext; a client that does not trust the
# server's CA fails and says why; mutual TLS refuses a client without a
# certificate and serves one with; a certificate rotated on disk serves new
# connections without a restart while a running stream finishes; bad TLS
# flags are start-up errors.
set -euo pipefail

. "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/testing/processes.sh" tls

command -v openssl >/dev/null || fail "openssl is not installed"

# make_ca NAME: a self-signed CA in $tmp/NAME-ca.{key,pem}.
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1 test CA" \
    -keyout "$tmp/$1-ca.key" -out "$tmp/$1-ca.pem" 2>/dev/null
}
# make_cert CA NAME CN [SAN]: $tmp/NAME.{key,pem} signed by CA.
make_cert() {
  local ca="$1" name="$2" cn="$3" san="${4:-}"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn" \
    -keyout "$tmp/$name.key" -out "$tmp/$name.csr" 2>/dev/null
  local ext="$tmp/$name.ext"
  : >"$ext"
  [ -n "$san" ] && echo "subjectAltName=$san" >"$ext"
  openssl x509 -req -in "$tmp/$name.csr" -CA "$tmp/$ca-ca.pem" \
    -CAkey "$tmp/$ca-ca.key" -CAcreateserial -days 2 -extfile "$ext" \
    -out "$tmp/$name.pem" 2>/dev/null
}

make_ca first
make_ca second
make_ca clients
make_cert first server1 localhost "DNS:localhost,IP:127.0.0.1"
make_cert second server2 localhost "DNS:localhost,IP:127.0.0.1"
make_cert clients client "training job"
make_cert second stranger "not a client"

"$shards_bin" --out_dir="$tmp/shards" --num_shards=2 --samples_per_shard=16 \
  >/dev/null
dataset="--dataset=train=$tmp/shards/*.tar"
fetch_flags=(--dataset=train --batch_size=8 --epochs=1 --checksum
             --unavailable_deadline_s=3 --stall_timeout_s=5)

checksum_of() { sed -n 's/^checksum=//p' "$1"; }

# Plaintext reference.
launch_server "$tmp/plain.log" --port=0 "$dataset" --threads=2
"$fetch_bin" --servers="127.0.0.1:$port" "${fetch_flags[@]}" >"$tmp/plain.out"
want="$(checksum_of "$tmp/plain.out")"
[ -n "$want" ] || fail "no checksum over plaintext"
kill "$pid"

# The live files the server watches (rotated below).
cp "$tmp/server1.pem" "$tmp/live.pem"
cp "$tmp/server1.key" "$tmp/live.key"
launch_server "$tmp/tls.log" --port=0 "$dataset" --threads=2 \
  --tls_cert="$tmp/live.pem" --tls_key="$tmp/live.key" --tls_refresh_s=1
tls_port="$port"
"$fetch_bin" --servers="localhost:$tls_port" --tls_ca="$tmp/first-ca.pem" \
  "${fetch_flags[@]}" >"$tmp/tls.out"
[ "$(checksum_of "$tmp/tls.out")" = "$want" ] \
  || fail "TLS epoch differs from plaintext"
echo "ok: TLS epoch = plaintext epoch ($want)"

# Not trusting the CA, or speaking plaintext to a TLS port: a clear failure.
status=0
"$fetch_bin" --servers="localhost:$tls_port" --tls_ca="$tmp/second-ca.pem" \
  "${fetch_flags[@]}" >/dev/null 2>"$tmp/untrusted.err" || status=$?
[ "$status" -ne 0 ] || fail "a client that does not trust the CA got data"
tail -n 1 "$tmp/untrusted.err" | grep -qF "must be signed by tls_ca '$tmp/second-ca.pem'" \
  || fail "no TLS reason for an untrusted server: $(cat "$tmp/untrusted.err")"
echo "ok: untrusted CA -> $(tail -n 1 "$tmp/untrusted.err")"
status=0
"$fetch_bin" --servers="localhost:$tls_port" "${fetch_flags[@]}" \
  >/dev/null 2>"$tmp/plain-to-tls.err" || status=$?
[ "$status" -ne 0 ] || fail "a plaintext client got data from a TLS port"

# Rotation: a slow stream runs across the swap to another CA's certificate
# and finishes; new connections then need the new CA.
"$fetch_bin" --servers="localhost:$tls_port" --tls_ca="$tmp/first-ca.pem" \
  "${fetch_flags[@]}" --step_ms=1000 --prefetch=1 --batches_per_request=1 \
  --keys_out="$tmp/slow.keys" >"$tmp/slow.out" 2>"$tmp/slow.err" &
slow=$!
# The slow stream is open and delivering before the swap.
wait_for_lines "$tmp/slow.keys" 1 "$slow"
cp "$tmp/server2.key" "$tmp/live.key.new"
cp "$tmp/server2.pem" "$tmp/live.pem.new"
mv "$tmp/live.key.new" "$tmp/live.key"
mv "$tmp/live.pem.new" "$tmp/live.pem"
rotated=""
for _ in $(seq 1 40); do
  if "$fetch_bin" --servers="localhost:$tls_port" \
      --tls_ca="$tmp/second-ca.pem" "${fetch_flags[@]}" \
      >"$tmp/rotated.out" 2>/dev/null; then
    rotated=yes
    break
  fi
  sleep 0.25
done
[ -n "$rotated" ] || fail "the rotated certificate was not picked up"
[ "$(checksum_of "$tmp/rotated.out")" = "$want" ] \
  || fail "epoch after rotation differs"
wait "$slow" || fail "the stream running across the rotation failed: $(cat "$tmp/slow.err")"
[ "$(checksum_of "$tmp/slow.out")" = "$want" ] \
  || fail "the stream across the rotation lost data"
echo "ok: rotated certificate served without a restart; the running stream finished"
kill "$pid"

# Mutual TLS.
launch_server "$tmp/mtls.log" --port=0 "$dataset" --threads=2 \
  --tls_cert="$tmp/server1.pem" --tls_key="$tmp/server1.key" \
  --tls_client_ca="$tmp/clients-ca.pem"
status=0
"$fetch_bin" --servers="localhost:$port" --tls_ca="$tmp/first-ca.pem" \
  "${fetch_flags[@]}" >/dev/null 2>"$tmp/nocert.err" || status=$?
[ "$status" -ne 0 ] || fail "mTLS served a client without a certificate"
status=0
"$fetch_bin" --servers="localhost:$port" --tls_ca="$tmp/first-ca.pem" \
  --tls_cert="$tmp/stranger.pem" --tls_key="$tmp/stranger.key" \
  "${fetch_flags[@]}" >/dev/null 2>"$tmp/stranger.err" || status=$?
[ "$status" -ne 0 ] || fail "mTLS served a client certificate of another CA"
"$fetch_bin" --servers="localhost:$port" --tls_ca="$tmp/first-ca.pem" \
  --tls_cert="$tmp/client.pem" --tls_key="$tmp/client.key" \
  "${fetch_flags[@]}" >"$tmp/mtls.out"
[ "$(checksum_of "$tmp/mtls.out")" = "$want" ] || fail "mTLS epoch differs"
echo "ok: mTLS refuses no certificate and a stranger's, serves the client"
kill "$pid"

# Bad flags: exit 2 with the reason, before listening.
refused() { server_refuses "$1" --port=0 "$dataset" "${@:2}"; }
refused "--tls_cert needs --tls_key" --tls_cert="$tmp/server1.pem"
refused "--tls_key and --tls_client_ca need --tls_cert" \
  --tls_key="$tmp/server1.key"
refused "--tls_cert '$tmp/nope.pem' is not a readable PEM file" \
  --tls_cert="$tmp/nope.pem" --tls_key="$tmp/server1.key"
status=0
"$fetch_bin" --servers="localhost:1" --tls_ca="$tmp/nope.pem" \
  "${fetch_flags[@]}" >/dev/null 2>"$tmp/fetch-bad.err" || status=$?
[ "$status" -eq 2 ] || fail "stoker_fetch with a missing CA file: status $status"
grep -qF "tls_ca '$tmp/nope.pem' is not a readable PEM file" "$tmp/fetch-bad.err" \
  || fail "stoker_fetch: $(cat "$tmp/fetch-bad.err")"
echo "PASS"
