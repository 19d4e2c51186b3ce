#!/usr/bin/env bash
# Puts the Apache Kafka Java clients and their runtime dependencies where the tests find
# them:
# - kafka-clients 3.9.1 in target/kafka-tests/java-lib/, from the PyPI wheel
#   shigawire-apache-flink-libraries, which ships them under pyflink/lib/;
# - kafka-clients 4.x in target/kafka-tests/java4-lib/, from Maven Central, each jar checked
#   against the SHA-256 pinned below (fetched directly: Maven's dependency plugin took
#   minutes to download itself);
# - Kafka Streams and Kafka Connect 4.x (the same 4.1.1) in target/kafka-tests/java4-apps-lib/,
#   likewise pinned; a program runs them with the java4-lib jars on its class path too.
# Idempotent: does nothing for a set whose stamp is already there.
set -euo pipefail

MAVEN_CENTRAL=${MAVEN_CENTRAL:-https://repo.maven.apache.org/maven2}
# kafka-clients 4.1.1 and its runtime dependencies (its pom): path under Maven Central, SHA-256.
JAVA4_JARS=(
  "org/apache/kafka/kafka-clients/4.1.1/kafka-clients-4.1.1.jar 00247122a572c3d3ae4eb60a50192a5811bc0181f51923d13018600f892e821d"
  "org/lz4/lz4-java/1.8.0/lz4-java-1.8.0.jar d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef"
  "org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"
  "org/xerial/snappy/snappy-java/1.1.10.7/snappy-java-1.1.10.7.jar 4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36"
  "com/github/luben/zstd-jni/1.5.6-10/zstd-jni-1.5.6-10.jar b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df"
)

# kafka-streams, connect-{api,runtime,file,json,transforms} 4.1.1 and their runtime dependencies
# except those of JAVA4_JARS (resolved once with `mvn dependency:list -DincludeScope=runtime` on
# a scratch pom of these six), plus slf4j-simple (the tests' slf4j binding, logging to stderr
# or a file at the level given by -Dorg.slf4j.simpleLogger.defaultLogLevel). Left out:
# rocksdbjni (68 MB), which kafka-streams only loads for RocksDB stores; the tests use
# in-memory stores.
JAVA4_APPS_JARS=(
  "com/fasterxml/jackson/core/jackson-annotations/2.19.0/jackson-annotations-2.19.0.jar ead60e9cac0e42b57092b9e2d087ff43536e9477d4486ba393037a8cc156cda7"
  "com/fasterxml/jackson/core/jackson-core/2.19.0/jackson-core-2.19.0.jar da8e859bac94874528116a25f20c68560e4287acbf27628711b8a4f96b028430"
  "com/fasterxml/jackson/core/jackson-databind/2.19.0/jackson-databind-2.19.0.jar ceda311f476c3b18e1d2b240c94e2dcb9c8d44e70f8afa9facab88bac4ddc03a"
  "com/fasterxml/jackson/datatype/jackson-datatype-jdk8/2.19.0/jackson-datatype-jdk8-2.19.0.jar 04f1a3f9da8155995dd00098d6847cdb9b7af67f4a3028c94031eff017c8e3e5"
  "com/fasterxml/jackson/jakarta/rs/jackson-jakarta-rs-base/2.19.0/jackson-jakarta-rs-base-2.19.0.jar f87bcd81a04b78c8aece6e1700a483ed9efd9c4afaf85bf8f7d4becb874e764e"
  "com/fasterxml/jackson/jakarta/rs/jackson-jakarta-rs-json-provider/2.19.0/jackson-jakarta-rs-json-provider-2.19.0.jar 86a4036dbc517ab520208ea2b9f5f4a5b71b66e238878a84a26ac2fc860cc355"
  "com/fasterxml/jackson/module/jackson-module-blackbird/2.19.0/jackson-module-blackbird-2.19.0.jar 9d038d1232aa7ab4927e5ac97e311e4483864e4c2cbba5de8a224dc09c28952d"
  "com/fasterxml/jackson/module/jackson-module-jakarta-xmlbind-annotations/2.19.0/jackson-module-jakarta-xmlbind-annotations-2.19.0.jar b032db242a4d6f7171ae619c48631480e78e350c5f2c10c348f2e2245bc36420"
  "com/sun/activation/jakarta.activation/2.0.1/jakarta.activation-2.0.1.jar b9e24b7dd6e07495562ea96531be3130c96dba4d78e1dfd88adbbdebf4332871"
  "io/github/classgraph/classgraph/4.8.179/classgraph-4.8.179.jar 16558357f234052370109127a45d69a9bd6d8646925594792634486dc48b159d"
  "io/swagger/core/v3/swagger-annotations/2.2.25/swagger-annotations-2.2.25.jar 602e84c35cbf0af44ad42d71a323dd57f632179fb212b7e90ca2ac8ce472dcbc"
  "jakarta/activation/jakarta.activation-api/2.1.0/jakarta.activation-api-2.1.0.jar 56e8d994095fe49c28138c60291482f66f18d12ac2b720e938697dce6a3135c7"
  "jakarta/annotation/jakarta.annotation-api/2.1.1/jakarta.annotation-api-2.1.1.jar 5f65fdaf424eee2b55e1d882ba9bb376be93fb09b37b808be6e22e8851c909fe"
  "jakarta/inject/jakarta.inject-api/2.0.1/jakarta.inject-api-2.0.1.jar f7dc98062fccf14126abb751b64fab12c312566e8cbdc8483598bffcea93af7c"
  "jakarta/servlet/jakarta.servlet-api/6.0.0/jakarta.servlet-api-6.0.0.jar c034eb1afb158987dbb53a5fea0cadf611c8dae8daadd59c44d9d5ab70129cef"
  "jakarta/validation/jakarta.validation-api/3.0.2/jakarta.validation-api-3.0.2.jar 291c25e6910cc6a7ebd96d4c6baebf6d7c37676c5482c2d96146e901b62c1fc9"
  "jakarta/ws/rs/jakarta.ws.rs-api/3.1.0/jakarta.ws.rs-api-3.1.0.jar 6b3b3628b8b4aedda0d24c3354335e985497d8ef3c510b8f3028e920d5b8663d"
  "jakarta/xml/bind/jakarta.xml.bind-api/3.0.1/jakarta.xml.bind-api-3.0.1.jar b8fb4bee3ff5b5c1ef77144d8411316018d7bbd41fcf1ede0646f7978546b867"
  "javax/activation/activation/1.1.1/activation-1.1.1.jar ae475120e9fcd99b4b00b38329bd61cdc5eb754eee03fe66c01f50e137724f99"
  "javax/activation/javax.activation-api/1.2.0/javax.activation-api-1.2.0.jar 43fdef0b5b6ceb31b0424b208b930c74ab58fac2ceeb7b3f6fd3aeb8b5ca4393"
  "javax/xml/bind/jaxb-api/2.3.1/jaxb-api-2.3.1.jar 88b955a0df57880a26a74708bc34f74dcaf8ebf4e78843a28b50eae945732b06"
  "org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar d919d904486c037f8d193412da0c92e22a9fa24230b9d67a57855c5c31c7e94e"
  "org/apache/kafka/connect-api/4.1.1/connect-api-4.1.1.jar 9e8fe3277d31410e3dd6c84b34967230bb5643b8424d3b96320ce1c43b4b5152"
  "org/apache/kafka/connect-file/4.1.1/connect-file-4.1.1.jar 9f7653f48fcc3e76690fa663f770c75a8f4efbb745c1e3d3e65611ff0ecbed67"
  "org/apache/kafka/connect-json/4.1.1/connect-json-4.1.1.jar bcfd54f2e5529461df2ed3698b6471e9e8924eb2f84b72b8b2581fc8e7ba6e17"
  "org/apache/kafka/connect-runtime/4.1.1/connect-runtime-4.1.1.jar 01600f8b4e3a26016ba3f87e12f1fec7945673a9654ee7fb93b3591e47837ed6"
  "org/apache/kafka/connect-transforms/4.1.1/connect-transforms-4.1.1.jar 419ccbd1bbd345e99c884d3d0f82f632a97b9e14a198c57a5890d0b8d05282ad"
  "org/apache/kafka/kafka-streams/4.1.1/kafka-streams-4.1.1.jar e554318dbc2b07461f714be32bb324744ba993eb7a49f938792beff577d7044b"
  "org/apache/maven/maven-artifact/3.9.6/maven-artifact-3.9.6.jar ad7a0fb408f8e47585ccc0d0011e0b501d93bfc9888d369bbd4a043d19475073"
  "org/bitbucket/b_c/jose4j/0.9.6/jose4j-0.9.6.jar 7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef"
  "org/codehaus/plexus/plexus-utils/3.5.1/plexus-utils-3.5.1.jar 86e0255d4c879c61b4833ed7f13124e8bb679df47debb127326e7db7dd49a07b"
  "org/eclipse/jetty/ee10/jetty-ee10-servlet/12.0.22/jetty-ee10-servlet-12.0.22.jar f0819307fe3108d703515d38890ca576c6b940e089ebf02993e223fd27dd945c"
  "org/eclipse/jetty/ee10/jetty-ee10-servlets/12.0.22/jetty-ee10-servlets-12.0.22.jar d55da9ba12b8d06d4618e6c09e0e5b64e104014b53a152b81387dad1edcb4f8a"
  "org/eclipse/jetty/jetty-alpn-client/12.0.22/jetty-alpn-client-12.0.22.jar 0c6b40cc72825e30e2935ea33c058b94783a6a7cdc345c20d2dc5585d4f8fd8d"
  "org/eclipse/jetty/jetty-client/12.0.22/jetty-client-12.0.22.jar 6d975e2ed44cad0618cc34cf0645eb6781482de90b23f70de8668fc275afb5a3"
  "org/eclipse/jetty/jetty-http/12.0.22/jetty-http-12.0.22.jar 124b31c6e570aadd5198fa3edf639927b1ffeb95b2fad9fc707e572c11ee1c83"
  "org/eclipse/jetty/jetty-io/12.0.22/jetty-io-12.0.22.jar aba6568fcbac7abd67d7f8a8807a8ae6c645937beb6666b517b128669cc37d6f"
  "org/eclipse/jetty/jetty-security/12.0.22/jetty-security-12.0.22.jar d6a779a81190479c404ccecd427ad24250a53265ed26ad1810b182a9b923e4de"
  "org/eclipse/jetty/jetty-server/12.0.22/jetty-server-12.0.22.jar dbac8c77cc006bb83f02603ae631ed81db99f5372b38e18b1ffc464edcdceba5"
  "org/eclipse/jetty/jetty-session/12.0.22/jetty-session-12.0.22.jar 15655a03efeb57f4d4fcbeb6c7d1bb341dc1a9be5e4cbaa3501c0aab11df9076"
  "org/eclipse/jetty/jetty-util/12.0.22/jetty-util-12.0.22.jar 87cc0f03036b795023465613d330f58d7094da21b37bb44bcb1f6329031075e6"
  "org/glassfish/hk2/external/aopalliance-repackaged/3.0.6/aopalliance-repackaged-3.0.6.jar a82b6d1a348324ef88dc807c7cd7aaf633985cbff7b30036fb61a1b86981d840"
  "org/glassfish/hk2/hk2-api/3.0.6/hk2-api-3.0.6.jar c049a21a9fd9316c7e291a2bc28835f70d25affb623dc1599a83b6b84ec83a4f"
  "org/glassfish/hk2/hk2-locator/3.0.6/hk2-locator-3.0.6.jar e2664d21b017c3aa1518b913264602bea604edc54d356103c10afba99abd04fc"
  "org/glassfish/hk2/hk2-utils/3.0.6/hk2-utils-3.0.6.jar fc84d85a0744b576d9ec7db5845eeb998ed532a9450dd19c8c922c3ee6926206"
  "org/glassfish/hk2/osgi-resource-locator/1.0.3/osgi-resource-locator-1.0.3.jar aab5d7849f7cfcda2cc7c541ba1bd365151d42276f151c825387245dfde3dd74"
  "org/glassfish/jersey/containers/jersey-container-servlet-core/3.1.10/jersey-container-servlet-core-3.1.10.jar fd15e7e37215d772ccdae8d4076c41a11ad3fec9ca88a1f8a8f6dacf4663bb69"
  "org/glassfish/jersey/containers/jersey-container-servlet/3.1.10/jersey-container-servlet-3.1.10.jar 4aadc66d2d36afb273b3898581d6aa51e0f992308d56fd51b8e3201efa461f67"
  "org/glassfish/jersey/core/jersey-client/3.1.10/jersey-client-3.1.10.jar 96cf86c23b515da20a30a39633a920f12a420d1e5f02c55ef5577ca2694d11c6"
  "org/glassfish/jersey/core/jersey-common/3.1.10/jersey-common-3.1.10.jar b8df5de87d48d6abf555f340755a056c8cb29a660af958e959db8a4cb3552b54"
  "org/glassfish/jersey/core/jersey-server/3.1.10/jersey-server-3.1.10.jar 1b33a9be417b72f7ceef3afe9780781b66122b0f1db78f2f82502988072cfab0"
  "org/glassfish/jersey/inject/jersey-hk2/3.1.10/jersey-hk2-3.1.10.jar 00ed71c496a856ac1f73272482a7abe27b5a96b823c29cc08f4b708c8d3e647e"
  "org/javassist/javassist/3.30.2-GA/javassist-3.30.2-GA.jar eba37290994b5e4868f3af98ff113f6244a6b099385d9ad46881307d3cb01aaf"
  "org/slf4j/slf4j-simple/1.7.36/slf4j-simple-1.7.36.jar 2f39bed943d624dfa8f4102d0571283a10870b6aa36f197a8a506f147010c10f"
)

WHEEL_NAME=shigawire-apache-flink-libraries
WHEEL_VERSION=2.0.0.post1
JARS=(kafka-clients slf4j-api lz4-java snappy-java zstd-jni)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# fetch_pinned <dest> <what> <entry>...: each entry ("path sum") from Maven Central into <dest>,
# checked against its SHA-256; a stamp named after the list makes a second call a no-op.
fetch_pinned() {
  local dest=$1 what=$2
  shift 2
  local stamp
  stamp="$dest/.stamp-$(printf '%s\n' "$@" | sha256sum | cut -c1-16)"
  [[ -f "$stamp" ]] && return 0
  rm -rf "$dest"
  mkdir -p "$dest"
  local entry path sum jar
  for entry in "$@"; do
    read -r path sum <<<"$entry"
    jar="$dest/$(basename "$path")"
    curl -sSfL --retry 5 --retry-all-errors --retry-delay 2 -o "$jar" "$MAVEN_CENTRAL/$path"
    echo "$sum  $jar" | sha256sum --check --quiet || { rm -f "$jar"; exit 1; }
  done
  echo "$what in $dest"
  touch "$stamp"
}

# The 4.x client, Streams and Connect from Maven Central.
fetch_pinned "$repo_root/target/kafka-tests/java4-lib" "kafka-clients 4.x" "${JAVA4_JARS[@]}"
fetch_pinned "$repo_root/target/kafka-tests/java4-apps-lib" "Kafka Streams and Connect 4.x" \
  "${JAVA4_APPS_JARS[@]}"

dest="$repo_root/target/kafka-tests/java-lib"
stamp="$dest/.stamp-$WHEEL_NAME-$WHEEL_VERSION"

if [[ -f "$stamp" ]]; then
  exit 0
fi

python=${PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x "$repo_root/.venv/bin/python" ]]; then python="$repo_root/.venv/bin/python"; else python=python3; fi
fi
python=$(command -v "$python")  # absolute: the script changes directory below

mkdir -p "$repo_root/target"
dl=$(mktemp -d "$repo_root/target/kafka-java-dl.XXXXXX")
trap 'rm -rf "$dl"' EXIT
"$python" -m pip download --quiet --no-deps --disable-pip-version-check \
  "$WHEEL_NAME==$WHEEL_VERSION" -d "$dl"
wheel=$(ls "$dl"/*.whl)

rm -rf "$dest"
mkdir -p "$dest"
members=()
for j in "${JARS[@]}"; do members+=("pyflink/lib/$j.jar"); done
# A wheel is a zip; Python's zipfile avoids needing `unzip` on the machine.
"$python" - "$wheel" "$dest" "${members[@]}" <<'PY'
import sys, zipfile, os
wheel, dest, *members = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    for m in members:
        if m not in names:
            sys.exit(f"{m} is not in {os.path.basename(wheel)}")
        with z.open(m) as src, open(os.path.join(dest, os.path.basename(m)), "wb") as out:
            out.write(src.read())
PY
version=$(cd "$dest" && "$python" -c "import zipfile; print(zipfile.ZipFile('kafka-clients.jar').read('kafka/kafka-version.properties').decode())" | sed -n 's/^version=//p')
echo "kafka-clients $version in $dest"
touch "$stamp"
