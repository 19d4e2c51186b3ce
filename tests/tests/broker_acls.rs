//! The authorization matrix (issue 23): for every API the broker advertises, a principal
//! without the ACL Kafka's authorization matrix asks for gets the authorization error (and
//! no data), and one granted exactly that ACL gets past authorization. The broker runs with
//! `authorizer_enabled`; its PLAINTEXT listener's principal (User:ANONYMOUS) is the super
//! user that sets things up, bob and alice log in with SASL PLAIN on its SASL listener.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_tests::clock::Deadline;

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TXN: i8 = 5;

const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DELETE: i8 = 6;
const ALTER: i8 = 7;
const DESCRIBE: i8 = 8;
const CLUSTER_ACTION: i8 = 9;
const DESCRIBE_CONFIGS: i8 = 10;
const ALTER_CONFIGS: i8 = 11;
const IDEMPOTENT_WRITE: i8 = 12;

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_DENIED: i16 = 53;
const AUTHORIZATION_ERRORS: [i16; 4] = [TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED];

/// The topic every per-topic case uses (it exists, with one partition).
const T: &str = "matrix";
/// Its consumer group and transactional id.
const G: &str = "matrix-group";
const X: &str = "matrix-txn";
/// A share group (share groups are served by default).
const SG: &str = "matrix-share";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Sends a case's request and returns its answer's error codes.
type Run = Box<dyn Fn(&mut Client) -> Vec<i16>>;

/// One API's case: the ACLs that allow it, the code refusing it, and its request.
struct Case {
    api: ApiKey,
    grants: Vec<(i8, &'static str, i8)>,
    denied: i16,
    run: Run,
}

fn case(
    api: ApiKey,
    grants: &[(i8, &'static str, i8)],
    denied: i16,
    run: impl Fn(&mut Client) -> Vec<i16> + 'static,
) -> Case {
    Case {
        api,
        grants: grants.to_vec(),
        denied,
        run: Box::new(run),
    }
}

fn acl(c: &mut Client, principal: &str, grants: &[(i8, &str, i8)]) {
    let creations = grants
        .iter()
        .map(|&(rt, name, op)| {
            create_acls_request::AclCreation::default()
                .with_resource_type(rt)
                .with_resource_name(s(name))
                .with_resource_pattern_type(3)
                .with_principal(s(principal))
                .with_host(s("*"))
                .with_operation(op)
                .with_permission_type(3)
        })
        .collect();
    let r = c.request(2, &CreateAclsRequest::default().with_creations(creations));
    assert!(r.results.iter().all(|x| x.error_code == 0), "{r:?}");
}

fn revoke_all(c: &mut Client, principal: &str) {
    let f = delete_acls_request::DeleteAclsFilter::default()
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_principal_filter(Some(s(principal)))
        .with_operation(1)
        .with_permission_type(1);
    let r = c.request(2, &DeleteAclsRequest::default().with_filters(vec![f]));
    assert_eq!(r.filter_results[0].error_code, 0);
}

fn produce_req() -> ProduceRequest {
    let ts = 1_700_000_000_000;
    let mut b = strand_wire::BatchBuilder::new(ts);
    b.push(ts, None, Some(b"v"), &[]);
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic_name(T))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(b.build())),
            ])])
}

#[expect(clippy::too_many_lines, reason = "one table row per API")]
fn topic_cases() -> Vec<Case> {
    vec![
        case(ApiKey::Produce, &[(TOPIC, T, WRITE)], TOPIC_DENIED, |c| {
            let r = c.request(9, &produce_req());
            vec![r.responses[0].partition_responses[0].error_code]
        }),
        case(ApiKey::Fetch, &[(TOPIC, T, READ)], TOPIC_DENIED, |c| {
            let req = FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(topic_name(T))
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_partition_max_bytes(1 << 20)])]);
            let r = c.request(11, &req);
            let p = &r.responses[0].partitions[0];
            if p.error_code != 0 {
                assert!(
                    p.records.as_ref().is_none_or(Bytes::is_empty),
                    "no data when refused"
                );
            }
            vec![p.error_code]
        }),
        case(
            ApiKey::ListOffsets,
            &[(TOPIC, T, DESCRIBE)],
            TOPIC_DENIED,
            |c| {
                let req = ListOffsetsRequest::default()
                    .with_replica_id((-1).into())
                    .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic_name(T))
                        .with_partitions(vec![
                            list_offsets_request::ListOffsetsPartition::default()
                                .with_partition_index(0)
                                .with_timestamp(-1),
                        ])]);
                vec![c.request(5, &req).topics[0].partitions[0].error_code]
            },
        ),
        case(
            ApiKey::Metadata,
            &[(TOPIC, T, DESCRIBE)],
            TOPIC_DENIED,
            |c| {
                let req = MetadataRequest::default()
                    .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
                    )
                    .with_name(Some(topic_name(T)))]));
                let r = c.request(9, &req);
                if r.topics[0].error_code != 0 {
                    assert!(r.topics[0].partitions.is_empty(), "no data when refused");
                }
                vec![r.topics[0].error_code]
            },
        ),
        case(
            ApiKey::OffsetForLeaderEpoch,
            &[(TOPIC, T, DESCRIBE)],
            TOPIC_DENIED,
            |c| {
                let req = OffsetForLeaderEpochRequest::default()
                    .with_replica_id((-1).into())
                    .with_topics(vec![
                        offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                            .with_topic(topic_name(T))
                            .with_partitions(vec![
                                offset_for_leader_epoch_request::OffsetForLeaderPartition::default(
                                )
                                .with_partition(0)
                                .with_current_leader_epoch(-1)
                                .with_leader_epoch(0),
                            ]),
                    ]);
                vec![c.request(4, &req).topics[0].partitions[0].error_code]
            },
        ),
        case(
            ApiKey::CreateTopics,
            &[(CLUSTER, "kafka-cluster", CREATE)],
            TOPIC_DENIED,
            |c| {
                let req = CreateTopicsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_validate_only(true)
                    .with_topics(vec![create_topics_request::CreatableTopic::default()
                        .with_name(topic_name("matrix-new"))
                        .with_num_partitions(1)
                        .with_replication_factor(1)]);
                vec![c.request(5, &req).topics[0].error_code]
            },
        ),
        case(
            ApiKey::CreatePartitions,
            &[(TOPIC, T, ALTER)],
            TOPIC_DENIED,
            |c| {
                let req = CreatePartitionsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_validate_only(true)
                    .with_topics(vec![
                        create_partitions_request::CreatePartitionsTopic::default()
                            .with_name(topic_name(T))
                            .with_count(2),
                    ]);
                vec![c.request(1, &req).results[0].error_code]
            },
        ),
        case(
            ApiKey::DeleteRecords,
            &[(TOPIC, T, DELETE)],
            TOPIC_DENIED,
            |c| {
                let req = DeleteRecordsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                        .with_name(topic_name(T))
                        .with_partitions(vec![
                            delete_records_request::DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(0),
                        ])]);
                vec![c.request(1, &req).topics[0].partitions[0].error_code]
            },
        ),
        case(
            ApiKey::DescribeConfigs,
            &[(TOPIC, T, DESCRIBE_CONFIGS)],
            TOPIC_DENIED,
            |c| {
                let req = DescribeConfigsRequest::default().with_resources(vec![
                    describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(s(T)),
                ]);
                let r = c.request(1, &req);
                if r.results[0].error_code != 0 {
                    assert!(r.results[0].configs.is_empty(), "no data when refused");
                }
                vec![r.results[0].error_code]
            },
        ),
        case(
            ApiKey::AlterConfigs,
            &[(TOPIC, T, ALTER_CONFIGS)],
            TOPIC_DENIED,
            |c| {
                let req = AlterConfigsRequest::default()
                    .with_validate_only(true)
                    .with_resources(vec![alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(s(T))]);
                vec![c.request(1, &req).responses[0].error_code]
            },
        ),
        case(
            ApiKey::IncrementalAlterConfigs,
            &[(TOPIC, T, ALTER_CONFIGS)],
            TOPIC_DENIED,
            |c| {
                let req = IncrementalAlterConfigsRequest::default()
                    .with_validate_only(true)
                    .with_resources(vec![
                        incremental_alter_configs_request::AlterConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(s(T)),
                    ]);
                vec![c.request(1, &req).responses[0].error_code]
            },
        ),
        case(
            ApiKey::DescribeProducers,
            &[(TOPIC, T, READ)],
            TOPIC_DENIED,
            |c| {
                let req = DescribeProducersRequest::default().with_topics(vec![
                    describe_producers_request::TopicRequest::default()
                        .with_name(topic_name(T))
                        .with_partition_indexes(vec![0]),
                ]);
                vec![c.request(0, &req).topics[0].partitions[0].error_code]
            },
        ),
        case(
            ApiKey::DeleteTopics,
            &[(TOPIC, "matrix-doomed", DELETE)],
            TOPIC_DENIED,
            |c| {
                let req = DeleteTopicsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topic_names(vec![topic_name("matrix-doomed")]);
                vec![c.request(4, &req).responses[0].error_code]
            },
        ),
    ]
}

#[expect(clippy::too_many_lines, reason = "one table row per API")]
fn group_cases() -> Vec<Case> {
    let member = || s("nobody");
    vec![
        case(
            ApiKey::ConsumerGroupHeartbeat,
            &[(GROUP, G, READ), (TOPIC, T, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                // Joins and leaves at once: the classic cases after it find no member.
                let join = ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_member_id(s("matrix-member"))
                    .with_member_epoch(0)
                    .with_rebalance_timeout_ms(30_000)
                    .with_subscribed_topic_names(Some(vec![topic_name(T)]))
                    .with_topic_partitions(Some(Vec::new()));
                let leave = ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_member_id(s("matrix-member"))
                    .with_member_epoch(-1);
                vec![
                    c.request(1, &join).error_code,
                    c.request(1, &leave).error_code,
                ]
            },
        ),
        case(
            ApiKey::ConsumerGroupDescribe,
            &[(GROUP, G, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                let req =
                    ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(G))]);
                vec![c.request(1, &req).groups[0].error_code]
            },
        ),
        case(
            ApiKey::FindCoordinator,
            &[(GROUP, G, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                let req = FindCoordinatorRequest::default().with_key(s(G));
                vec![c.request(3, &req).error_code]
            },
        ),
        case(
            ApiKey::JoinGroup,
            &[(GROUP, G, READ)],
            GROUP_DENIED,
            move |c| {
                let req = JoinGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_session_timeout_ms(10_000)
                    .with_rebalance_timeout_ms(10_000)
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                    )
                    .with_name(s("range"))]);
                vec![c.request(5, &req).error_code]
            },
        ),
        case(
            ApiKey::SyncGroup,
            &[(GROUP, G, READ)],
            GROUP_DENIED,
            move |c| {
                let req = SyncGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_member_id(member())
                    .with_generation_id(1);
                vec![c.request(3, &req).error_code]
            },
        ),
        case(
            ApiKey::Heartbeat,
            &[(GROUP, G, READ)],
            GROUP_DENIED,
            move |c| {
                let req = HeartbeatRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_member_id(member())
                    .with_generation_id(1);
                vec![c.request(3, &req).error_code]
            },
        ),
        case(
            ApiKey::LeaveGroup,
            &[(GROUP, G, READ)],
            GROUP_DENIED,
            move |c| {
                let req = LeaveGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_members(vec![
                        leave_group_request::MemberIdentity::default().with_member_id(member())
                    ]);
                vec![c.request(3, &req).error_code]
            },
        ),
        case(
            ApiKey::OffsetCommit,
            &[(GROUP, G, READ), (TOPIC, T, READ)],
            GROUP_DENIED,
            |c| {
                let req = OffsetCommitRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_generation_id_or_member_epoch(-1)
                    .with_member_id(s(""))
                    .with_topics(vec![
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(topic_name(T))
                            .with_partitions(vec![
                                offset_commit_request::OffsetCommitRequestPartition::default()
                                    .with_partition_index(0)
                                    .with_committed_offset(0),
                            ]),
                    ]);
                vec![c.request(7, &req).topics[0].partitions[0].error_code]
            },
        ),
        case(
            ApiKey::OffsetFetch,
            &[(GROUP, G, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                let req = OffsetFetchRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_topics(None);
                vec![c.request(7, &req).error_code]
            },
        ),
        case(
            ApiKey::OffsetDelete,
            &[(GROUP, G, DELETE), (TOPIC, T, READ)],
            GROUP_DENIED,
            |c| {
                let req = OffsetDeleteRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_topics(vec![
                        offset_delete_request::OffsetDeleteRequestTopic::default()
                            .with_name(topic_name(T))
                            .with_partitions(vec![
                                offset_delete_request::OffsetDeleteRequestPartition::default()
                                    .with_partition_index(0),
                            ]),
                    ]);
                vec![c.request(0, &req).error_code]
            },
        ),
        case(
            ApiKey::DescribeGroups,
            &[(GROUP, G, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(G))]);
                let r = c.request(5, &req);
                if r.groups[0].error_code != 0 {
                    assert!(r.groups[0].members.is_empty(), "no data when refused");
                }
                vec![r.groups[0].error_code]
            },
        ),
        case(
            ApiKey::DeleteGroups,
            &[(GROUP, G, DELETE)],
            GROUP_DENIED,
            |c| {
                let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(G))]);
                vec![c.request(2, &req).results[0].error_code]
            },
        ),
    ]
}

/// The share-group APIs (KIP-932) a client sends: the group's READ (DESCRIBE to describe,
/// DELETE to delete offsets) and its topics' READ or DESCRIBE, as Kafka checks them.
#[expect(clippy::too_many_lines, reason = "one table row per API")]
fn share_cases() -> Vec<Case> {
    let share_topics = &[(GROUP, SG, READ), (TOPIC, T, READ)];
    vec![
        case(
            ApiKey::ShareGroupHeartbeat,
            &[(GROUP, SG, READ), (TOPIC, T, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                // Joins and leaves: the group is there, empty, for the cases after it.
                let beat = |epoch: i32| {
                    ShareGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(s(SG)))
                        .with_member_id(s("matrix-share-member"))
                        .with_member_epoch(epoch)
                        .with_subscribed_topic_names((epoch == 0).then(|| vec![topic_name(T)]))
                };
                vec![
                    c.request(1, &beat(0)).error_code,
                    c.request(1, &beat(-1)).error_code,
                ]
            },
        ),
        case(
            ApiKey::ShareGroupDescribe,
            &[(GROUP, SG, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                let req = ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(SG))]);
                vec![c.request(1, &req).groups[0].error_code]
            },
        ),
        case(ApiKey::ShareFetch, share_topics, GROUP_DENIED, |c| {
            let req = ShareFetchRequest::default()
                .with_group_id(Some(GroupId(s(SG))))
                .with_member_id(Some(s("matrix-share-member")))
                .with_share_session_epoch(0);
            vec![c.request(1, &req).error_code]
        }),
        case(ApiKey::ShareAcknowledge, share_topics, GROUP_DENIED, |c| {
            let req = ShareAcknowledgeRequest::default()
                .with_group_id(Some(GroupId(s(SG))))
                .with_member_id(Some(s("matrix-share-member")))
                .with_share_session_epoch(1);
            vec![c.request(1, &req).error_code]
        }),
        case(
            ApiKey::DescribeShareGroupOffsets,
            &[(GROUP, SG, DESCRIBE)],
            GROUP_DENIED,
            |c| {
                let group = describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(GroupId(s(SG)));
                let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![group]);
                vec![c.request(0, &req).groups[0].error_code]
            },
        ),
        case(
            ApiKey::AlterShareGroupOffsets,
            share_topics,
            GROUP_DENIED,
            |c| {
                use alter_share_group_offsets_request::{
                    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
                };
                let topic = AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(topic_name(T))
                    .with_partitions(vec![AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(0)
                        .with_start_offset(0)]);
                let req = AlterShareGroupOffsetsRequest::default()
                    .with_group_id(GroupId(s(SG)))
                    .with_topics(vec![topic]);
                vec![c.request(0, &req).error_code]
            },
        ),
        case(
            ApiKey::DeleteShareGroupOffsets,
            &[(GROUP, SG, DELETE), (TOPIC, T, READ)],
            GROUP_DENIED,
            |c| {
                let topic = delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(topic_name(T));
                let req = DeleteShareGroupOffsetsRequest::default()
                    .with_group_id(GroupId(s(SG)))
                    .with_topics(vec![topic]);
                vec![c.request(0, &req).error_code]
            },
        ),
    ]
}

/// The share-state requests between brokers: CLUSTER_ACTION, refused per partition. A
/// topic id no topic has keeps them from changing anything when served.
fn share_state_cases() -> Vec<Case> {
    /// `$request` naming partition 0 of a topic id no topic has (`$data` of `$module`);
    /// its partitions' codes.
    macro_rules! state_case {
        ($api:expr, $request:ident, $module:ident, $data:ident) => {
            case($api, &[(CLUSTER, C, CLUSTER_ACTION)], CLUSTER_DENIED, |c| {
                use $module::{$data, PartitionData};
                let req = $request::default()
                    .with_group_id(s("matrix-share-state"))
                    .with_topics(vec![$data::default()
                        .with_topic_id(uuid::Uuid::from_u128(0x5eed))
                        .with_partitions(vec![PartitionData::default().with_partition(0)])]);
                let r = c.request(0, &req);
                r.results[0]
                    .partitions
                    .iter()
                    .map(|p| p.error_code)
                    .collect()
            })
        };
    }
    vec![
        state_case!(
            ApiKey::ReadShareGroupState,
            ReadShareGroupStateRequest,
            read_share_group_state_request,
            ReadStateData
        ),
        state_case!(
            ApiKey::WriteShareGroupState,
            WriteShareGroupStateRequest,
            write_share_group_state_request,
            WriteStateData
        ),
        state_case!(
            ApiKey::DeleteShareGroupState,
            DeleteShareGroupStateRequest,
            delete_share_group_state_request,
            DeleteStateData
        ),
    ]
}

#[expect(clippy::too_many_lines, reason = "one table row per API")]
fn txn_cases() -> Vec<Case> {
    vec![
        case(
            ApiKey::InitProducerId,
            &[(TXN, X, WRITE)],
            TXN_DENIED,
            |c| {
                let req = InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(s(X))))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id((-1).into())
                    .with_producer_epoch(-1);
                vec![c.request(4, &req).error_code]
            },
        ),
        case(
            ApiKey::AddPartitionsToTxn,
            &[(TXN, X, WRITE), (TOPIC, T, WRITE)],
            TXN_DENIED,
            |c| {
                let req = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s(X)))
                    .with_v3_and_below_producer_id(1.into())
                    .with_v3_and_below_topics(vec![
                        add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                            .with_name(topic_name(T))
                            .with_partitions(vec![0]),
                    ]);
                let r = c.request(3, &req);
                if r.error_code != 0 {
                    return vec![r.error_code];
                }
                r.results_by_topic_v3_and_below[0]
                    .results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
                    .collect()
            },
        ),
        case(
            ApiKey::AddOffsetsToTxn,
            &[(TXN, X, WRITE), (GROUP, G, READ)],
            TXN_DENIED,
            |c| {
                let req = AddOffsetsToTxnRequest::default()
                    .with_transactional_id(TransactionalId(s(X)))
                    .with_producer_id(1.into())
                    .with_group_id(GroupId(s(G)));
                vec![c.request(3, &req).error_code]
            },
        ),
        case(ApiKey::EndTxn, &[(TXN, X, WRITE)], TXN_DENIED, |c| {
            let req = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s(X)))
                .with_producer_id(1.into());
            vec![c.request(3, &req).error_code]
        }),
        case(
            ApiKey::TxnOffsetCommit,
            &[(TXN, X, WRITE), (GROUP, G, READ), (TOPIC, T, READ)],
            TXN_DENIED,
            |c| {
                let req = TxnOffsetCommitRequest::default()
                    .with_transactional_id(TransactionalId(s(X)))
                    .with_group_id(GroupId(s(G)))
                    .with_producer_id(1.into())
                    .with_topics(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                            .with_name(topic_name(T))
                            .with_partitions(vec![
                                txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(0)
                                    .with_committed_offset(0),
                            ]),
                    ]);
                vec![c.request(3, &req).topics[0].partitions[0].error_code]
            },
        ),
        case(
            ApiKey::DescribeTransactions,
            &[(TXN, X, DESCRIBE)],
            TXN_DENIED,
            |c| {
                let req = DescribeTransactionsRequest::default()
                    .with_transactional_ids(vec![TransactionalId(s(X))]);
                vec![c.request(0, &req).transaction_states[0].error_code]
            },
        ),
        case(
            ApiKey::WriteTxnMarkers,
            &[(CLUSTER, "kafka-cluster", CLUSTER_ACTION)],
            CLUSTER_DENIED,
            |c| {
                let req = WriteTxnMarkersRequest::default().with_markers(vec![
                    write_txn_markers_request::WritableTxnMarker::default()
                        .with_producer_id(1.into())
                        .with_transaction_result(false)
                        .with_topics(vec![
                            write_txn_markers_request::WritableTxnMarkerTopic::default()
                                .with_name(topic_name(T))
                                .with_partition_indexes(vec![0]),
                        ]),
                ]);
                vec![c.request(1, &req).markers[0].topics[0].partitions[0].error_code]
            },
        ),
    ]
}

const C: &str = "kafka-cluster";

#[expect(clippy::too_many_lines, reason = "one table row per API")]
fn cluster_cases() -> Vec<Case> {
    vec![
        case(
            ApiKey::InitProducerId,
            &[(CLUSTER, C, IDEMPOTENT_WRITE)],
            CLUSTER_DENIED,
            |c| {
                let req = InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id((-1).into())
                    .with_producer_epoch(-1);
                vec![c.request(4, &req).error_code]
            },
        ),
        case(
            ApiKey::DescribeCluster,
            &[(CLUSTER, C, DESCRIBE)],
            CLUSTER_DENIED,
            |c| {
                let r = c.request(0, &DescribeClusterRequest::default());
                if r.error_code != 0 {
                    assert!(r.brokers.is_empty(), "no data when refused");
                }
                vec![r.error_code]
            },
        ),
        case(
            ApiKey::DescribeQuorum,
            &[(CLUSTER, C, DESCRIBE)],
            CLUSTER_DENIED,
            |c| vec![c.request(0, &DescribeQuorumRequest::default()).error_code],
        ),
        case(
            ApiKey::UnregisterBroker,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                let req = UnregisterBrokerRequest::default().with_broker_id(7.into());
                vec![c.request(0, &req).error_code]
            },
        ),
        case(
            ApiKey::AddRaftVoter,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                let req = AddRaftVoterRequest::default()
                    .with_voter_id(7)
                    .with_timeout_ms(100);
                vec![c.request(0, &req).error_code]
            },
        ),
        case(
            ApiKey::RemoveRaftVoter,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                let req = RemoveRaftVoterRequest::default().with_voter_id(7);
                vec![c.request(0, &req).error_code]
            },
        ),
        case(
            ApiKey::AlterPartitionReassignments,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                vec![
                    c.request(0, &AlterPartitionReassignmentsRequest::default())
                        .error_code,
                ]
            },
        ),
        case(
            ApiKey::ListPartitionReassignments,
            &[(CLUSTER, C, DESCRIBE)],
            CLUSTER_DENIED,
            |c| {
                vec![
                    c.request(0, &ListPartitionReassignmentsRequest::default())
                        .error_code,
                ]
            },
        ),
        case(
            ApiKey::DescribeUserScramCredentials,
            &[(CLUSTER, C, DESCRIBE)],
            CLUSTER_DENIED,
            |c| {
                let r = c.request(0, &DescribeUserScramCredentialsRequest::default());
                if r.error_code != 0 {
                    assert!(r.results.is_empty(), "no data when refused");
                }
                vec![r.error_code]
            },
        ),
        case(
            ApiKey::AlterUserScramCredentials,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                let req = AlterUserScramCredentialsRequest::default().with_deletions(vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(s("nobody"))
                        .with_mechanism(1),
                ]);
                vec![c.request(0, &req).results[0].error_code]
            },
        ),
        case(
            ApiKey::DescribeClientQuotas,
            &[(CLUSTER, C, DESCRIBE_CONFIGS)],
            CLUSTER_DENIED,
            |c| {
                let r = c.request(1, &DescribeClientQuotasRequest::default());
                if r.error_code != 0 {
                    assert!(
                        r.entries.as_ref().is_none_or(Vec::is_empty),
                        "no data when refused"
                    );
                }
                vec![r.error_code]
            },
        ),
        case(
            ApiKey::AlterClientQuotas,
            &[(CLUSTER, C, ALTER_CONFIGS)],
            CLUSTER_DENIED,
            |c| {
                let op = alter_client_quotas_request::OpData::default()
                    .with_key(s("producer_byte_rate"))
                    .with_value(1000.0);
                let entity = alter_client_quotas_request::EntityData::default()
                    .with_entity_type(s("client-id"))
                    .with_entity_name(Some(s("matrix")));
                let req = AlterClientQuotasRequest::default()
                    .with_validate_only(true)
                    .with_entries(vec![alter_client_quotas_request::EntryData::default()
                        .with_entity(vec![entity])
                        .with_ops(vec![op])]);
                vec![c.request(1, &req).entries[0].error_code]
            },
        ),
        case(
            ApiKey::DescribeAcls,
            &[(CLUSTER, C, DESCRIBE)],
            CLUSTER_DENIED,
            |c| {
                let req = DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(1)
                    .with_operation(1)
                    .with_permission_type(1);
                let r = c.request(2, &req);
                if r.error_code != 0 {
                    assert!(r.resources.is_empty(), "no data when refused");
                }
                vec![r.error_code]
            },
        ),
        case(
            ApiKey::CreateAcls,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                let req = CreateAclsRequest::default().with_creations(vec![
                    create_acls_request::AclCreation::default()
                        .with_resource_type(TOPIC)
                        .with_resource_name(s("matrix-other"))
                        .with_resource_pattern_type(3)
                        .with_principal(s("User:carol"))
                        .with_host(s("*"))
                        .with_operation(READ)
                        .with_permission_type(3),
                ]);
                vec![c.request(2, &req).results[0].error_code]
            },
        ),
        case(
            ApiKey::DeleteAcls,
            &[(CLUSTER, C, ALTER)],
            CLUSTER_DENIED,
            |c| {
                let req = DeleteAclsRequest::default().with_filters(vec![
                    delete_acls_request::DeleteAclsFilter::default()
                        .with_resource_type_filter(TOPIC)
                        .with_resource_name_filter(Some(s("matrix-other")))
                        .with_pattern_type_filter(3)
                        .with_operation(1)
                        .with_permission_type(1),
                ]);
                vec![c.request(2, &req).filter_results[0].error_code]
            },
        ),
    ]
}

/// APIs every connection may use (authentication, negotiation), and those that filter what
/// they list instead of refusing (checked by `listings_show_only_what_may_be_described`).
const NOT_REFUSED: [ApiKey; 5] = [
    ApiKey::ApiVersions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::ListGroups,
    ApiKey::ListTransactions,
];

fn login(b: &Broker, user: &str) -> Client {
    let mut c = Client::connect(b.sasl_addr()).expect("connect to the SASL listener");
    c.authenticate_plain(user, &format!("{user} pw"))
        .unwrap_or_else(|e| panic!("{user} logs in: {e:#}"));
    c
}

fn setup(b: &Broker) -> Client {
    let mut admin = b.connect();
    let upserts = ["alice", "bob"]
        .iter()
        .map(|u| {
            alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                .with_name(s(u))
                .with_mechanism(1)
                .with_iterations(4096)
                .with_salt(Bytes::from_static(b"matrix-salt"))
                .with_salted_password(salted(&format!("{u} pw")))
        })
        .collect();
    let r = admin.request(
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(upserts),
    );
    assert!(r.results.iter().all(|x| x.error_code == 0), "{r:?}");
    admin.create_topic(T, 1);
    admin.create_topic("matrix-doomed", 1);
    admin.wait_coordinator(G, Deadline::after(std::time::Duration::from_secs(30)));
    admin
}

/// SCRAM-SHA-256's SaltedPassword of `password` with the setup's salt and 4096 iterations.
fn salted(password: &str) -> Bytes {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password.as_bytes(), b"matrix-salt", 4096, &mut out);
    Bytes::copy_from_slice(&out)
}

#[test]
fn every_api_refuses_a_principal_without_its_acl_and_serves_one_with_it() {
    let b = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            sasl_listener: true,
            extra_args: vec![
                "--authorizer-enabled".into(),
                "true".into(),
                "--super-users".into(),
                "User:ANONYMOUS".into(),
            ],
            ..Options::default()
        },
    );
    let mut admin = setup(&b);
    let advertised: BTreeSet<i16> = admin
        .api_versions()
        .expect("ApiVersions")
        .api_keys
        .iter()
        .map(|k| k.api_key)
        .collect();
    let cases: Vec<Case> = [
        topic_cases(),
        group_cases(),
        share_cases(),
        share_state_cases(),
        txn_cases(),
        cluster_cases(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let covered: BTreeSet<i16> = cases
        .iter()
        .map(|c| c.api as i16)
        .chain(NOT_REFUSED.iter().map(|k| *k as i16))
        .collect();
    let missing: Vec<i16> = advertised.difference(&covered).copied().collect();
    assert!(
        missing.is_empty(),
        "advertised APIs without a case: {missing:?}"
    );
    let mut bob = login(&b, "bob");
    let mut alice = login(&b, "alice");
    for case in &cases {
        let refused = (case.run)(&mut bob);
        assert!(
            refused.iter().all(|c| *c == case.denied),
            "{:?} without an ACL: {refused:?}, expected {}",
            case.api,
            case.denied
        );
        acl(&mut admin, "User:alice", &case.grants);
        let served = (case.run)(&mut alice);
        assert!(
            served.iter().all(|c| !AUTHORIZATION_ERRORS.contains(c)),
            "{:?} with {:?}: {served:?}",
            case.api,
            case.grants
        );
        revoke_all(&mut admin, "User:alice");
    }
}

#[test]
fn listings_show_only_what_may_be_described() {
    let b = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            sasl_listener: true,
            extra_args: vec![
                "--authorizer-enabled".into(),
                "true".into(),
                "--super-users".into(),
                "User:ANONYMOUS".into(),
            ],
            ..Options::default()
        },
    );
    let mut admin = setup(&b);
    // A group with a committed offset exists.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(topic_name(T))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(0),
                ]),
        ]);
    assert_eq!(
        admin.request(7, &commit).topics[0].partitions[0].error_code,
        0
    );
    let groups = |c: &mut Client| -> Vec<String> {
        let r = c.request(4, &ListGroupsRequest::default());
        assert_eq!(r.error_code, 0);
        r.groups.iter().map(|g| g.group_id.0.to_string()).collect()
    };
    let topics = |c: &mut Client| -> Vec<String> {
        let r = c.request(9, &MetadataRequest::default().with_topics(None));
        r.topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect()
    };
    assert!(groups(&mut admin).contains(&G.to_string()));
    assert!(topics(&mut admin).contains(&T.to_string()));
    let mut bob = login(&b, "bob");
    assert_eq!(groups(&mut bob), Vec::<String>::new());
    assert_eq!(topics(&mut bob), Vec::<String>::new());
    acl(
        &mut admin,
        "User:bob",
        &[(GROUP, G, DESCRIBE), (TOPIC, T, READ)],
    );
    assert_eq!(groups(&mut bob), vec![G.to_string()]);
    assert_eq!(topics(&mut bob), vec![T.to_string()]);
}
