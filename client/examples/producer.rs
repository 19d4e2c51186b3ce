//! Produces lines from stdin to a topic with the native client, printing each record's
//! partition and offset as JSON.
//!
//! `cargo run -p strand-client --example producer -- 127.0.0.1:9093 events [key-separator]`
//! With a key separator (e.g. `:`), `key:value` lines get a key.

use std::io::BufRead;

use strand_client::{Client, ClientConfig, ProducerConfig, ProducerRecord};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(bootstrap), Some(topic)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: producer BOOTSTRAP TOPIC [KEY_SEPARATOR] < lines");
        std::process::exit(2);
    };
    let separator = args.get(3);
    let client = Client::connect(ClientConfig::new(bootstrap.as_str())).await?;
    let producer = client.producer(ProducerConfig::default()).await?;
    let mut deliveries = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut record = ProducerRecord::new(topic.as_str());
        record = match separator.and_then(|s| line.split_once(s.as_str())) {
            Some((k, v)) => record.key(k.to_string()).value(v.to_string()),
            None => record.value(line),
        };
        deliveries.push(producer.send(record).await?);
    }
    producer.flush().await?;
    for d in deliveries {
        let m = d.await?;
        println!(
            "{{\"partition\": {}, \"offset\": {}}}",
            m.partition, m.offset
        );
    }
    Ok(())
}
