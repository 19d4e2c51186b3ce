//! `strandctl broker`: a node's configs, or the cluster default's, like
//! `kafka-configs.sh --entity-type brokers` (DescribeConfigs, IncrementalAlterConfigs on a
//! BROKER resource). A node's own configs are asked of that node (Metadata names its
//! address), as Kafka's clients do; the cluster default goes to any node.
//!
//! Invariant: a non-zero Kafka error code becomes a `KafkaError::Broker`, never a success
//! line.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{DescribeConfigsRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;

use crate::cli::{BrokerCmd, BrokerTarget};
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::output::Table;
use crate::topic::{alter_config, config_source_name};

/// DescribeConfigs / IncrementalAlterConfigs resource type of a broker.
const RESOURCE_BROKER: i8 = 4;
/// ConfigSource values of dynamic broker configs (set for the node, or the cluster default).
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT: i8 = 3;

/// Runs a `broker` subcommand and returns what to print.
pub fn run(client: &mut KafkaClient, cmd: &BrokerCmd) -> Result<String, KafkaError> {
    match cmd {
        BrokerCmd::DescribeConfig { target, all } => {
            let (mut conn, name, label) = connect_to(client, target)?;
            describe(conn.as_mut().unwrap_or(client), &name, &label, *all)
        }
        BrokerCmd::AlterConfig {
            target,
            set,
            delete,
        } => {
            let (mut conn, name, label) = connect_to(client, target)?;
            let c = conn.as_mut().unwrap_or(client);
            alter_config(c, RESOURCE_BROKER, &name, &label, set, delete)
        }
    }
}

/// The connection a target's requests go to (None: the one given), its resource name and
/// how it is printed.
fn connect_to(
    client: &mut KafkaClient,
    target: &BrokerTarget,
) -> Result<(Option<KafkaClient>, String, String), KafkaError> {
    let Some(id) = target.id else {
        return Ok((None, String::new(), "cluster default".into()));
    };
    let meta = client.send(&MetadataRequest::default().with_topics(Some(Vec::new())))?;
    let Some(b) = meta.brokers.iter().find(|b| b.node_id.0 == id) else {
        return Err(KafkaError::Broker {
            what: format!("broker {id}"),
            name: "BROKER_NOT_AVAILABLE".into(),
            code: 8,
            detail: ": not in the Metadata response".into(),
        });
    };
    let addr = format!("{}:{}", b.host.as_str(), b.port);
    let conn = KafkaClient::connect(&addr, client.timeout())?;
    Ok((Some(conn), id.to_string(), format!("broker {id}")))
}

fn describe(
    client: &mut KafkaClient,
    name: &str,
    label: &str,
    all: bool,
) -> Result<String, KafkaError> {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_BROKER)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configuration_keys(None)]);
    let resp = client.send(&req)?;
    let mut table = Table::new(&["CONFIG", "VALUE", "SOURCE", "DYNAMIC"]);
    for r in &resp.results {
        check_code(
            r.error_code,
            &format!("describe configs of {label}"),
            r.error_message.as_ref(),
        )?;
        for c in &r.configs {
            let dynamic = matches!(
                c.config_source,
                SOURCE_DYNAMIC_BROKER | SOURCE_DYNAMIC_DEFAULT
            );
            if !all && !dynamic {
                continue;
            }
            let value = crate::topic::shown_value(c);
            table.row(vec![
                c.name.to_string(),
                value,
                config_source_name(c.config_source).into(),
                if c.read_only { "no" } else { "yes" }.into(),
            ]);
        }
    }
    if table.is_empty() {
        return Ok(format!(
            "no dynamic configs set for the {label} (--all shows every config)\n"
        ));
    }
    Ok(table.render())
}
