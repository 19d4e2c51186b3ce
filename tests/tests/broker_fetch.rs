//! Fetch at every version the broker advertises, against the real binary: each client
//! library uses one version, so the others would go untested. Up to v12 a topic is named by
//! its name; from v13 (KIP-516) by its id, which the answer echoes, and an id no topic has
//! is answered UNKNOWN_TOPIC_ID (100) as Kafka answers it (@platformatic/kafka's consumer
//! fetches by id; on v12 it sent the id where the name goes, issue 26).

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, FetchRequest, MetadataRequest};
use strand_tests::broker::{topic_name, Broker, Options};
use strand_wire::BatchBuilder;

const TOPIC: &str = "fetch-versions";
/// The first Fetch version that names topics by id.
const TOPIC_IDS_VERSION: i16 = 13;
/// Kafka's UNKNOWN_TOPIC_ID.
const UNKNOWN_TOPIC_ID: i16 = 100;
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// A one-partition Fetch from offset 0 at `version`, naming the topic by `name` before v13
/// and by `id` from v13.
fn fetch(version: i16, name: &str, id: uuid::Uuid) -> FetchRequest {
    let mut t = FetchTopic::default().with_partitions(vec![FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1 << 20)]);
    t = if version >= TOPIC_IDS_VERSION {
        t.with_topic_id(id)
    } else {
        t.with_topic(topic_name(name))
    };
    let r = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![t]);
    if version >= 15 {
        r
    } else {
        r.with_replica_id((-1).into())
    }
}

#[test]
fn fetch_answers_at_every_advertised_version_by_name_and_by_topic_id() {
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    let versions = c.api_versions().expect("ApiVersions");
    let range = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Fetch as i16)
        .map(|k| (k.min_version, k.max_version))
        .expect("Fetch is advertised");
    assert!(
        range.1 >= TOPIC_IDS_VERSION,
        "Fetch by topic id (v13+) is advertised: {range:?}"
    );

    c.create_topic(TOPIC, 1);
    let mut b = BatchBuilder::new(1_700_000_000_000);
    b.push(1_700_000_000_000, Some(b"k"), Some(b"fetched"), &[]);
    let r = c.produce(TOPIC, 0, b.build(), -1);
    assert_eq!((r.error_code, r.base_offset), (0, 0), "produce: {r:?}");
    let meta = c.request(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic_name(TOPIC)))
        ])),
    );
    let id = meta.topics[0].topic_id;
    assert!(!id.is_nil(), "Metadata v12 names the topic id: {meta:?}");

    for version in range.0..=range.1 {
        let resp = c.request(version, &fetch(version, TOPIC, id));
        assert_eq!(resp.responses.len(), 1, "v{version}: {resp:?}");
        let t = &resp.responses[0];
        if version >= TOPIC_IDS_VERSION {
            assert_eq!(t.topic_id, id, "v{version} echoes the topic id");
        } else {
            assert_eq!(t.topic.0.as_str(), TOPIC, "v{version} echoes the name");
        }
        let p = &t.partitions[0];
        assert_eq!(
            (p.error_code, p.high_watermark),
            (0, 1),
            "v{version}: {p:?}"
        );
        assert!(
            p.records.as_ref().is_some_and(|r| !r.is_empty()),
            "v{version} returns the record: {p:?}"
        );
    }

    // An id no topic has, and (before v13) a name no topic has.
    let unknown = uuid::Uuid::from_u128(0x5eed);
    let resp = c.request(TOPIC_IDS_VERSION, &fetch(TOPIC_IDS_VERSION, "", unknown));
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, UNKNOWN_TOPIC_ID, "{resp:?}");
    assert_eq!(resp.responses[0].topic_id, unknown);
    // A known id with a partition the topic does not have: the partition is what is
    // unknown (found by the differential test against Kafka 4.1.2).
    let mut req = fetch(TOPIC_IDS_VERSION, "", id);
    req.topics[0].partitions[0].partition = 9;
    let resp = c.request(TOPIC_IDS_VERSION, &req);
    assert_eq!(
        resp.responses[0].partitions[0].error_code, UNKNOWN_TOPIC_OR_PARTITION,
        "{resp:?}"
    );
    let resp = c.request(12, &fetch(12, "no-such-topic", uuid::Uuid::nil()));
    assert_eq!(
        resp.responses[0].partitions[0].error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    // The id route leaves the name empty, as Kafka does from v13.
    let resp = c.request(range.1, &fetch(range.1, TOPIC, id));
    assert_eq!(resp.responses[0].topic, topic_name(""));
    broker.assert_alive();
    drop(c);
    broker.stop();
}
