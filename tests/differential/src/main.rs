//! strand-diff: differential testing of Strand against Apache Kafka (issue 26).
//!
//! Sends both brokers the same requests (the corpus in [`cases`]), at the lowest, a middle
//! and the highest version both advertise, decodes both answers with `kafka-protocol` at
//! that version, masks what legitimately differs ([`value`]) and compares field by field.
//! A difference not accepted in expected.tsv ([`expected`]) fails the run (exit 1).
//!
//! Usage: `strand-diff --strand HOST:PORT --kafka HOST:PORT [--quick] [--only SUBSTR]
//! [--expected FILE] [--raw]`. Never changes either broker beyond the topics and groups
//! the corpus creates (all named `diff-*`).

mod cases;
mod clock;
mod env;
mod expected;
mod value;
mod wire;

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest};

use crate::cases::{Case, Compare, CASES};
use crate::env::Env;
use crate::value::{Difference, Value};
use crate::wire::{Conn, Outcome};

struct Args {
    strand: String,
    kafka: String,
    quick: bool,
    only: Option<String>,
    expected: String,
    raw: bool,
    wait_ready_s: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        strand: String::new(),
        kafka: String::new(),
        quick: false,
        only: None,
        expected: concat!(env!("CARGO_MANIFEST_DIR"), "/expected.tsv").to_string(),
        raw: false,
        wait_ready_s: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{arg} needs a value"));
        match arg.as_str() {
            "--strand" => a.strand = value()?,
            "--kafka" => a.kafka = value()?,
            "--only" => a.only = Some(value()?),
            "--expected" => a.expected = value()?,
            "--quick" => a.quick = true,
            "--raw" => a.raw = true,
            "--wait-ready-s" => a.wait_ready_s = value()?.parse()?,
            other => bail!(
                "unknown argument {other}; usage: strand-diff --strand HOST:PORT --kafka \
                 HOST:PORT [--quick] [--only SUBSTR] [--expected FILE] [--raw] [--wait-ready-s N]"
            ),
        }
    }
    if a.strand.is_empty() || a.kafka.is_empty() {
        bail!("--strand HOST:PORT and --kafka HOST:PORT are required");
    }
    Ok(a)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("strand-diff: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// (api key, min, max) from one broker's ApiVersions.
type Ranges = BTreeMap<i16, (i16, i16)>;

fn advertised(addr: &str) -> anyhow::Result<Ranges> {
    let mut conn = Conn::new(addr);
    let resp = conn.call(&ApiVersionsRequest::default(), 0)?;
    if resp.error_code != 0 {
        bail!("{addr}: ApiVersions error {}", resp.error_code);
    }
    Ok(resp
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect())
}

/// Polls ApiVersions until the broker answers, for at most `wait_s` seconds.
fn advertised_when_ready(addr: &str, wait_s: u64) -> anyhow::Result<Ranges> {
    let deadline = clock::Deadline::after(std::time::Duration::from_secs(wait_s));
    loop {
        match advertised(addr) {
            Ok(r) => return Ok(r),
            Err(e) if deadline.passed() => {
                return Err(e.context(format!("not ready after {wait_s} s")))
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

/// Per API Strand advertises: the versions Strand, Kafka and the codec all speak.
fn common_ranges(strand: &Ranges, kafka: &Ranges) -> Ranges {
    let mut out = Ranges::new();
    for (&key, &(slo, shi)) in strand {
        let (Some(&(klo, khi)), Ok(api)) = (kafka.get(&key), ApiKey::try_from(key)) else {
            continue;
        };
        let codec = api.valid_versions();
        let lo = slo.max(klo).max(codec.min);
        let hi = shi.min(khi).min(codec.max);
        if lo <= hi {
            out.insert(key, (lo, hi));
        }
    }
    out
}

/// The lowest, a middle and the highest version of `range`.
fn versions_to_test(range: (i16, i16), quick: bool) -> Vec<i16> {
    let (lo, hi) = range;
    if quick {
        return vec![hi];
    }
    let mut v = vec![lo, lo + (hi - lo) / 2, hi];
    v.dedup();
    v
}

fn print_versions(strand: &Ranges, kafka: &Ranges, common: &Ranges) {
    println!("== ApiVersions (informational)");
    println!(
        "{:<30} {:>8} {:>8} {:>8}",
        "api", "strand", "kafka", "tested"
    );
    let keys: std::collections::BTreeSet<i16> =
        strand.keys().chain(kafka.keys()).copied().collect();
    let show = |r: Option<&(i16, i16)>| r.map_or("-".to_string(), |(a, b)| format!("{a}-{b}"));
    let name = |k: i16| ApiKey::try_from(k).map_or(format!("api {k}"), |a| format!("{a:?}"));
    let kafka_only: Vec<String> = keys
        .iter()
        .filter(|k| !strand.contains_key(k))
        .map(|&k| name(k))
        .collect();
    for k in keys {
        if !strand.contains_key(&k) {
            continue;
        }
        let name = name(k);
        let (s, ka, c) = (strand.get(&k), kafka.get(&k), common.get(&k));
        let note = match (s, ka) {
            (Some(s), Some(ka)) if s != ka => "  (ranges differ)",
            (None, Some(_)) => "  (Kafka only)",
            (Some(_), None) => "  (Strand only)",
            _ => "",
        };
        println!(
            "{name:<30} {:>8} {:>8} {:>8}{note}",
            show(s),
            show(ka),
            show(c)
        );
    }
    println!(
        "Kafka only ({}): {}",
        kafka_only.len(),
        kafka_only.join(", ")
    );
    println!();
}

fn run() -> anyhow::Result<bool> {
    let args = parse_args()?;
    let started = clock::Stopwatch::start();
    let text = std::fs::read_to_string(&args.expected)
        .with_context(|| format!("reading {}", args.expected))?;
    let accepted = expected::parse(&text)?;
    let strand_ranges = advertised_when_ready(&args.strand, args.wait_ready_s).context("strand")?;
    let kafka_ranges = advertised_when_ready(&args.kafka, args.wait_ready_s).context("kafka")?;
    println!("brokers ready after {:.1} s", started.seconds());
    let started = clock::Stopwatch::start();
    let common = common_ranges(&strand_ranges, &kafka_ranges);
    print_versions(&strand_ranges, &kafka_ranges, &common);
    let mut envs = [
        Env::new("strand", &args.strand, common.clone()),
        Env::new("kafka", &args.kafka, common.clone()),
    ];
    for env in &mut envs {
        cases::setup(env).with_context(|| format!("setup on {}", env.label))?;
    }
    println!("setup done in {:.1} s\n", started.seconds());
    let tally = run_corpus(&args, &common, &mut envs, &accepted);
    println!(
        "\n== {} runs: {} same, {} with only accepted differences, {} FAILED; {} cases skipped; {:.1} s",
        tally.runs,
        tally.same,
        tally.accepted,
        tally.failed.len(),
        tally.skipped.len(),
        started.seconds()
    );
    for f in &tally.failed {
        println!("FAILED {f}");
    }
    Ok(tally.failed.is_empty())
}

/// Runs every selected case at its versions on both brokers and reports each run.
fn run_corpus(
    args: &Args,
    common: &Ranges,
    envs: &mut [Env; 2],
    accepted: &[expected::Entry],
) -> Tally {
    let mut tally = Tally::default();
    let mut used = vec![false; accepted.len()];
    for case in CASES {
        if args.quick && !case.quick {
            continue;
        }
        if args.only.as_deref().is_some_and(|o| !case.name.contains(o)) {
            continue;
        }
        let Some(&(lo, hi)) = common.get(&(case.api as i16)) else {
            println!(
                "SKIP {}: {:?} is not advertised by both brokers",
                case.name, case.api
            );
            tally.skipped.push(case.name);
            continue;
        };
        if hi < case.min_version {
            println!(
                "SKIP {}: needs {:?} v{}+",
                case.name, case.api, case.min_version
            );
            tally.skipped.push(case.name);
            continue;
        }
        for v in versions_to_test((lo.max(case.min_version), hi), args.quick) {
            let watch = clock::Stopwatch::start();
            let diffs = run_case(case, v, envs, args.raw);
            report(
                case,
                v,
                watch.seconds(),
                &diffs,
                accepted,
                &mut used,
                &mut tally,
            );
        }
    }
    for (e, used) in accepted.iter().zip(&used) {
        if !used && !args.quick && args.only.is_none() {
            println!(
                "note: expected.tsv:{} matched nothing ({} {})",
                e.line, e.case, e.path
            );
        }
    }
    tally
}

#[derive(Default)]
struct Tally {
    runs: usize,
    same: usize,
    accepted: usize,
    failed: Vec<String>,
    skipped: Vec<&'static str>,
}

/// Runs one case at one version on both brokers and compares.
fn run_case(case: &Case, v: i16, envs: &mut [Env; 2], raw: bool) -> Vec<Difference> {
    let mut results = Vec::new();
    let mut compare = Compare::Full;
    for env in envs.iter_mut() {
        let outcome = match (case.build)(env, v) {
            Ok(p) => {
                compare = p.compare;
                let o = env.conn.exchange(p.req.as_ref(), p.wire);
                if raw {
                    println!("  [{}] request: {}", env.label, p.req.describe());
                }
                o
            }
            Err(e) => Outcome::Failed(format!("preparing: {e:#}")),
        };
        let tree = to_tree(&outcome, compare);
        if let Some(Value::Str(id) | Value::Atom(id)) =
            tree.as_ref().ok().and_then(|t| value::get(t, "member_id"))
        {
            env.joined_by_answer(Some(id.as_str()));
        } else {
            env.joined_by_answer(None);
        }
        env.leave_all();
        if raw {
            if let Outcome::Answer(d) = &outcome {
                println!("  [{}] answer: {}", env.label, d.debug);
            }
        }
        results.push(tree);
    }
    let kafka = results.pop().expect("two results");
    let strand = results.pop().expect("two results");
    match (strand, kafka) {
        (Ok(mut a), Ok(mut b)) => {
            for t in [&mut a, &mut b] {
                value::mask(t);
                value::sort(t);
            }
            value::diff(&a, &b)
        }
        (a, b) => {
            let show = |r: &Result<Value, String>| match r {
                Ok(_) => "an answer".to_string(),
                Err(e) => e.clone(),
            };
            // Both closing the connection is an answer (to a version neither knows); both
            // failing alike (a timeout, an encoding error) is the harness's problem and
            // must not pass as agreement.
            if a == b && a.as_ref().is_err_and(|e| e == CLOSED) {
                return Vec::new();
            }
            vec![Difference {
                path: "(outcome)".into(),
                strand: show(&a),
                kafka: show(&b),
            }]
        }
    }
}

/// How a closed connection shows in the report.
const CLOSED: &str = "closed the connection";

/// The unmasked tree of an answer; `Err` describes a non-answer (closed, failed).
fn to_tree(outcome: &Outcome, compare: Compare) -> Result<Value, String> {
    let d = match outcome {
        Outcome::Answer(d) => d,
        Outcome::Closed => return Err(CLOSED.into()),
        Outcome::Failed(e) => return Err(format!("failed: {e}")),
    };
    let mut tree = value::parse(&d.debug).map_err(|e| format!("unparsable Debug: {e}"))?;
    value::expand_records(&mut tree, &d.record_sets);
    if d.trailing_bytes > 0 {
        if let Value::Struct(fields) = &mut tree {
            fields.push((
                "(trailing_bytes)".into(),
                Value::Atom(d.trailing_bytes.to_string()),
            ));
        }
    }
    if compare == Compare::ErrorCodeOnly {
        let code = value::get(&tree, "error_code")
            .cloned()
            .unwrap_or(Value::Null);
        tree = Value::Struct(vec![("error_code".into(), code)]);
    }
    Ok(tree)
}

/// Kafka's name of an error code appended to `*error_code` values, for the reader.
fn annotate(path: &str, v: &str) -> String {
    if !path.ends_with("error_code") {
        return v.to_string();
    }
    match v.parse::<i16>().ok().and_then(|c| c.err()) {
        Some(e) => format!("{v} ({e})"),
        None => v.to_string(),
    }
}

fn report(
    case: &Case,
    v: i16,
    seconds: f64,
    diffs: &[Difference],
    accepted: &[expected::Entry],
    used: &mut [bool],
    tally: &mut Tally,
) {
    tally.runs += 1;
    let mut failing = Vec::new();
    let mut ok = Vec::new();
    for d in diffs {
        match accepted
            .iter()
            .position(|e| e.accepts(case.name, v, &d.path))
        {
            Some(i) => {
                used[i] = true;
                ok.push((d, i));
            }
            None => failing.push(d),
        }
    }
    let head = format!("{} {:?} v{v}", case.name, case.api);
    let status = match (failing.is_empty(), ok.is_empty()) {
        (true, true) => {
            tally.same += 1;
            "ok"
        }
        (true, false) => {
            tally.accepted += 1;
            "ok (accepted differences)"
        }
        (false, _) => {
            tally.failed.push(head.clone());
            "FAIL"
        }
    };
    println!("{status:<4} {head} ({seconds:.1} s)");
    for d in failing {
        println!(
            "     {}: strand={} kafka={}",
            d.path,
            cut(&annotate(&d.path, &d.strand)),
            cut(&annotate(&d.path, &d.kafka))
        );
    }
    // One line per accepted entry: its first difference and how many more it covers.
    let mut shown: Vec<usize> = Vec::new();
    for (d, i) in &ok {
        if shown.contains(i) {
            continue;
        }
        shown.push(*i);
        let more = ok.iter().filter(|(_, j)| j == i).count() - 1;
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        println!(
            "     accepted (expected.tsv:{}: {}) {}: strand={} kafka={}{more}",
            accepted[*i].line,
            accepted[*i].reason.chars().take(60).collect::<String>(),
            d.path,
            cut(&annotate(&d.path, &d.strand)),
            cut(&annotate(&d.path, &d.kafka))
        );
    }
}

/// Long values (record sets, config lists) cut for the report; `--raw` shows all.
fn cut(s: &str) -> String {
    const MAX_CHARS: usize = 200;
    if s.chars().count() <= MAX_CHARS {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX_CHARS).collect();
    format!("{head}... ({} chars)", s.chars().count())
}
