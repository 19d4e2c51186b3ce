//! Authorized-operations bitfields (KIP-430) for the Metadata, DescribeCluster and
//! DescribeGroups requests that ask for them: of the operations Kafka defines for the
//! resource, those the authorizer allows the caller (every one without
//! `authorizer_enabled`, as a Kafka broker without an authorizer answers:
//! AuthHelper.authorizedOperations).

/// Kafka's AclOperation codes (the bit positions).
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

const fn bits(ops: &[u8]) -> i32 {
    let mut field = 0i32;
    let mut i = 0;
    while i < ops.len() {
        field |= 1 << ops[i];
        i += 1;
    }
    field
}

/// A topic's operations (AclEntry.supportedOperations(TOPIC)).
pub const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);
/// The cluster's operations.
pub const CLUSTER: i32 = bits(&[
    CREATE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
]);
/// A consumer group's operations.
pub const GROUP: i32 = bits(&[READ, DELETE, DESCRIBE]);

/// The operations of `supported` (a field above) that `ctx`'s principal may do on the
/// resource `name` of `resource_type`.
pub fn of(
    ctx: &super::Ctx,
    shard: &crate::shard::Shard,
    supported: i32,
    resource_type: i8,
    name: &str,
) -> i32 {
    (0u8..31)
        .filter(|b| supported & (1 << b) != 0)
        .filter(|b| ctx.allowed(shard, *b as i8, resource_type, name))
        .fold(0, |field, b| field | (1 << b))
}

/// The cluster's operations `ctx`'s principal may do.
pub fn cluster(ctx: &super::Ctx, shard: &crate::shard::Shard) -> i32 {
    use crate::security::acl;
    of(
        ctx,
        shard,
        CLUSTER,
        acl::resource::CLUSTER,
        acl::CLUSTER_NAME,
    )
}

/// A group's authorized operations for the caller (the describe requests of every group
/// protocol).
pub fn of_group(ctx: &super::Ctx, shard: &crate::shard::Shard, group: &str) -> i32 {
    of(
        ctx,
        shard,
        GROUP,
        crate::security::acl::resource::GROUP,
        group,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_hold_kafkas_operation_counts() {
        // As librdkafka's test 0081 expects of a broker without an authorizer.
        assert_eq!(
            (TOPIC.count_ones(), CLUSTER.count_ones(), GROUP.count_ones()),
            (8, 7, 3)
        );
        assert_eq!(GROUP, 0b1_0100_1000);
    }
}
