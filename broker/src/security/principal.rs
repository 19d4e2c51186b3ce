//! The principal of a mutual-TLS client, as Kafka derives it: the certificate's subject
//! written as Java's `X500Principal.getName()` writes it (RFC 2253: the last RDN first,
//! `,` between RDNs, `+` inside one, CN/C/L/ST/O/OU/STREET/DC/UID by name and other
//! attributes as `OID=#hex`), then `ssl.principal.mapping.rules`: `RULE:pattern/replacement/`
//! with an optional `L` or `U` (lower or upper case the result), and `DEFAULT` (the subject
//! unchanged), tried in order; the first rule whose pattern matches the whole subject wins.
//!
//! Invariant: a subject no rule matches has no principal (Kafka refuses the connection);
//! rules that do not parse are refused at start, with the rule named.

use regex::Regex;

/// Errors of the rules and certificates.
#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    /// `ssl.principal.mapping.rules` does not parse.
    #[error("ssl_principal_mapping_rules: {0}")]
    Rules(String),
    /// The client certificate does not parse.
    #[error("the client certificate does not parse: {0}")]
    Certificate(String),
}

/// One mapping rule.
#[derive(Clone, Debug)]
enum Rule {
    /// The subject unchanged.
    Default,
    /// A pattern over the whole subject and its replacement (in `regex`'s syntax).
    Replace {
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

/// Case change after a replacement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Parsed `ssl.principal.mapping.rules`.
#[derive(Clone, Debug)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl PrincipalMapper {
    /// Parses rules as Kafka's `SslPrincipalMapper` does (`DEFAULT` or
    /// `RULE:pattern/replacement/[LU]`, comma separated; `\` escapes a `/` or `,`).
    pub fn parse(text: &str) -> Result<PrincipalMapper, PrincipalError> {
        let mut rules = Vec::new();
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            let (rule, after) = if let Some(after) = rest.strip_prefix("DEFAULT") {
                (Rule::Default, after)
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                parse_rule(after)?
            } else {
                return Err(PrincipalError::Rules(format!(
                    "'{rest}' is neither DEFAULT nor RULE:pattern/replacement/"
                )));
            };
            rules.push(rule);
            let after = after.trim_start();
            rest = match after.strip_prefix(',') {
                Some(next) => next.trim_start(),
                None if after.is_empty() => after,
                None => {
                    return Err(PrincipalError::Rules(format!(
                        "unexpected '{after}' after a rule (rules are separated by ',')"
                    )))
                }
            };
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalMapper { rules })
    }

    /// The principal name of `subject`, if a rule matches it.
    pub fn map(&self, subject: &str) -> Option<String> {
        self.rules.iter().find_map(|r| match r {
            Rule::Default => Some(subject.to_string()),
            Rule::Replace {
                pattern,
                replacement,
                case,
            } => {
                let caps = pattern.captures(subject)?;
                let mut out = String::new();
                caps.expand(replacement, &mut out);
                Some(match case {
                    Case::Keep => out,
                    Case::Lower => out.to_lowercase(),
                    Case::Upper => out.to_uppercase(),
                })
            }
        })
    }
}

/// Reads `pattern/replacement/[LU]` (after `RULE:`): the rule and the text after it.
fn parse_rule(text: &str) -> Result<(Rule, &str), PrincipalError> {
    let (pattern, rest) = until_slash(text).ok_or_else(|| {
        PrincipalError::Rules(format!("RULE:{text} has no '/' after its pattern"))
    })?;
    let (replacement, rest) = until_slash(rest).ok_or_else(|| {
        PrincipalError::Rules(format!("RULE:{text} has no '/' after its replacement"))
    })?;
    let (case, rest) = match rest.chars().next() {
        Some('L') => (Case::Lower, &rest[1..]),
        Some('U') => (Case::Upper, &rest[1..]),
        _ => (Case::Keep, rest),
    };
    let pattern = Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| PrincipalError::Rules(format!("pattern '{pattern}': {e}")))?;
    let rule = Rule::Replace {
        pattern,
        replacement: java_replacement(replacement),
        case,
    };
    Ok((rule, rest))
}

/// The text up to the first `/` not escaped by `\` (escapes kept, as the regex and the
/// replacement read them), and the text after that `/`.
fn until_slash(text: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    None
}

/// A Java replacement (`$1`, `\x` for a literal x) in `regex`'s syntax (`${1}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len() + 4);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(next) => out.push(next),
                None => {}
            },
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str("${");
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    out.push(d);
                }
                out.push('}');
            }
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

/// The subject of a DER certificate as Java's `X500Principal.getName()` writes it.
pub fn subject_of(cert_der: &[u8]) -> Result<String, PrincipalError> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| PrincipalError::Certificate(e.to_string()))?;
    let mut rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    match (short_name(&oid), atv.as_str()) {
                        (Some(name), Ok(value)) => format!("{name}={}", escape(value)),
                        _ => format!("{oid}=#{}", der_hex(atv.attr_value())),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.reverse();
    Ok(rdns.join(","))
}

/// The keyword RFC 2253 (and Java) writes for an attribute type.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// RFC 2253 escaping of a value: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Hex of an attribute value's DER encoding (tag, length, content), as RFC 2253 writes
/// values of types it has no keyword for.
fn der_hex(value: &x509_parser::der_parser::asn1_rs::Any<'_>) -> String {
    let data = value.data;
    let mut der = vec![u8::try_from(value.tag().0).unwrap_or(0x04)];
    let len = data.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        der.push(0x80 | bytes.len() as u8);
        der.extend(bytes);
    }
    der.extend_from_slice(data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keeps_the_subject() {
        let m = PrincipalMapper::parse("DEFAULT").expect("rules");
        assert_eq!(m.map("CN=a,O=b").as_deref(), Some("CN=a,O=b"));
        let m = PrincipalMapper::parse("").expect("empty is DEFAULT");
        assert_eq!(m.map("CN=a").as_deref(), Some("CN=a"));
    }

    /// The examples of Kafka's documentation of `ssl.principal.mapping.rules` and its
    /// `SslPrincipalMapperTest`.
    #[test]
    fn rules_map_as_kafkas_examples() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT",
        )
        .expect("rules");
        assert_eq!(
            m.map("CN=kafka1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
                .as_deref(),
            Some("kafka1")
        );
        assert_eq!(
            m.map("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US")
                .as_deref(),
            Some("duke@javasoft")
        );
        assert_eq!(
            m.map("OU=JavaSoft,cn=Tester,O=Sun").as_deref(),
            Some("tester")
        );
        assert_eq!(
            m.map("OU=JavaSoft,O=Sun").as_deref(),
            Some("OU=JavaSoft,O=Sun")
        );
        let u = PrincipalMapper::parse("RULE:^CN=(.*?),OU=(.*)$/$1 in $2/U").expect("rules");
        assert_eq!(u.map("CN=a,OU=b").as_deref(), Some("A IN B"));
        assert_eq!(u.map("O=x"), None, "no rule matches: no principal");
    }

    #[test]
    fn escapes_in_rules_are_kept_for_the_regex_and_read_in_the_replacement() {
        let m = PrincipalMapper::parse(r"RULE:^CN=(.*)\/(.*)$/$1\/x\$/").expect("rules");
        assert_eq!(m.map("CN=a/b").as_deref(), Some("a/x$"));
        assert_eq!(java_replacement("$1$2x"), "${1}${2}x");
        assert_eq!(java_replacement("$x"), "$$x");
    }

    #[test]
    fn bad_rules_are_refused() {
        for bad in [
            "RULE:abc",
            "RULE:^a$/b",
            "NOPE",
            "DEFAULT DEFAULT",
            "RULE:(/x/",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_writes_them() {
        assert_eq!(escape("a,b+c"), r"a\,b\+c");
        assert_eq!(escape("#x "), r"\#x\ ");
        assert_eq!(escape(" a"), r"\ a");
        assert_eq!(escape("plain"), "plain");
    }
}
