//! A broker restarted after a crash or a clean stop listens on its old port at once, while
//! connections of the previous process still linger in TIME_WAIT. Apache Kafka does (the
//! JVM sets SO_REUSEADDR on server sockets); clients and operators know a broker by its
//! address, so a broker that cannot rebind for a minute (the TIME_WAIT period) after every
//! restart is down for that minute.

use strand_tests::broker::{Broker, Options};

#[test]
fn restart_rebinds_its_port_while_old_connections_linger() {
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    c.api_versions().expect("ApiVersions");

    // kill -9 with a client connected; the client then closes too, as real ones do, so the
    // broker's side of the connection is in TIME_WAIT.
    broker.kill9();
    drop(c);
    broker.restart();
    let mut c = broker.connect();
    c.api_versions().expect("ApiVersions after kill -9");

    // A clean stop with a client connected.
    broker.stop();
    drop(c);
    broker.restart();
    broker
        .connect()
        .api_versions()
        .expect("ApiVersions after SIGTERM");
}
