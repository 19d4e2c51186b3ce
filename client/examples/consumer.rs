//! Reads every partition of a topic from the start with the native client and prints
//! each record as one JSON line, until `COUNT` records were read or 10 s pass quietly.
//!
//! `cargo run -p strand-client --example consumer -- 127.0.0.1:9093 events 100`

use std::time::Duration;

use strand_client::{Client, ClientConfig, ConsumerConfig, Offset};

fn json_str(b: Option<&[u8]>) -> String {
    match b {
        None => "null".into(),
        Some(b) => {
            let s = String::from_utf8_lossy(b);
            let escaped: String = s
                .chars()
                .flat_map(|c| match c {
                    '"' => vec!['\\', '"'],
                    '\\' => vec!['\\', '\\'],
                    c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
                    c => vec![c],
                })
                .collect();
            format!("\"{escaped}\"")
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(bootstrap), Some(topic), Some(count)) = (args.get(1), args.get(2), args.get(3))
    else {
        eprintln!("usage: consumer BOOTSTRAP TOPIC COUNT");
        std::process::exit(2);
    };
    let count: usize = count.parse()?;
    let client = Client::connect(ClientConfig::new(bootstrap.as_str())).await?;
    let mut consumer = client.consumer(ConsumerConfig::default());
    for p in 0..client.partition_count(topic).await? {
        consumer
            .assign(topic, i32::try_from(p)?, Offset::Earliest)
            .await?;
    }
    let mut seen = 0;
    let mut quiet = Duration::ZERO;
    while seen < count && quiet < Duration::from_secs(10) {
        let records = consumer.poll().await?;
        if records.is_empty() {
            quiet += Duration::from_millis(500);
        }
        for r in records {
            seen += 1;
            let headers: Vec<String> = r
                .headers
                .iter()
                .map(|(k, v)| {
                    format!(
                        "[{}, {}]",
                        json_str(Some(k.as_bytes())),
                        json_str(v.as_deref())
                    )
                })
                .collect();
            println!(
                "{{\"partition\": {}, \"offset\": {}, \"key\": {}, \"value\": {}, \"headers\": [{}]}}",
                r.partition,
                r.offset,
                json_str(r.key.as_deref()),
                json_str(r.value.as_deref()),
                headers.join(", ")
            );
        }
    }
    Ok(())
}
