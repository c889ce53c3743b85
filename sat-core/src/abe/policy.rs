//! Access policies: boolean formulas over attributes, as a tenant writes
//! them (`(tenant-a and analyst) or admin`), checked and put into the form
//! the ABE scheme takes.
//!
//! Grammar (keywords in any case; `and` binds tighter than `or`):
//!
//! ```text
//! policy := term ("or" term)*
//! term   := factor ("and" factor)*
//! factor := ATTRIBUTE | "(" policy ")"
//! ATTRIBUTE: letters, digits, '_', '-', '.', ':' (not "and"/"or")
//! ```
//!
//! Why a parser of our own: the AC17 scheme of `rabe` panics on an AND or OR
//! node with more than two children, so a policy is normalized into nested
//! pairs before it reaches the scheme, and every attribute is quoted so that
//! `_` and `-` in names are taken literally.

use std::fmt;

/// A parsed policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    Attribute(String),
    And(Vec<Policy>),
    Or(Vec<Policy>),
}

/// Why a policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {policy:?}, at character {at}: {why}")]
pub struct PolicyError {
    pub policy: String,
    pub at: usize,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Word(String),
}

fn is_attribute_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

fn tokens(text: &str) -> Result<Vec<(usize, Token)>, PolicyError> {
    let err = |at: usize, why: String| PolicyError {
        policy: text.to_owned(),
        at,
        why,
    };
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '(' {
            chars.next();
            out.push((i, Token::Open));
        } else if c == ')' {
            chars.next();
            out.push((i, Token::Close));
        } else if is_attribute_char(c) {
            let mut word = String::new();
            while let Some(&(_, c)) = chars.peek() {
                if !is_attribute_char(c) {
                    break;
                }
                word.push(c);
                chars.next();
            }
            let token = match word.to_ascii_lowercase().as_str() {
                "and" => Token::And,
                "or" => Token::Or,
                _ => Token::Word(word),
            };
            out.push((i, token));
        } else {
            return Err(err(
                i,
                format!(
                    "{c:?} is not allowed: attributes are letters, digits, '_', '-', '.' and ':', \
                     joined by 'and', 'or' and parentheses"
                ),
            ));
        }
    }
    Ok(out)
}

/// The most bytes, attributes and levels of parentheses a policy may have.
/// Policies also arrive from the S-DSM (in epoch records), so the parser,
/// which recurses, and the scheme's pairs, nested one level per attribute,
/// must never meet an input as deep as an attacker likes.
pub const MAX_POLICY_BYTES: usize = 16 * 1024;
pub const MAX_POLICY_ATTRIBUTES: usize = 256;
pub const MAX_POLICY_DEPTH: usize = 32;

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<(usize, Token)>,
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, why: &str) -> PolicyError {
        let at = self
            .tokens
            .get(self.at)
            .map_or(self.text.len(), |(i, _)| *i);
        PolicyError {
            policy: self.text.to_owned(),
            at,
            why: why.to_owned(),
        }
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(_, t)| t)
    }

    fn policy(&mut self) -> Result<Policy, PolicyError> {
        let mut terms = vec![self.term()?];
        while self.peek() == Some(&Token::Or) {
            self.at += 1;
            terms.push(self.term()?);
        }
        Ok(if terms.len() == 1 {
            terms.pop().expect("one")
        } else {
            Policy::Or(terms)
        })
    }

    fn term(&mut self) -> Result<Policy, PolicyError> {
        let mut factors = vec![self.factor()?];
        while self.peek() == Some(&Token::And) {
            self.at += 1;
            factors.push(self.factor()?);
        }
        Ok(if factors.len() == 1 {
            factors.pop().expect("one")
        } else {
            Policy::And(factors)
        })
    }

    fn factor(&mut self) -> Result<Policy, PolicyError> {
        match self.peek().cloned() {
            Some(Token::Word(w)) => {
                self.at += 1;
                Ok(Policy::Attribute(w))
            }
            Some(Token::Open) => {
                if self.depth == MAX_POLICY_DEPTH {
                    return Err(self.err(&format!(
                        "parentheses nest more than {MAX_POLICY_DEPTH} deep"
                    )));
                }
                self.at += 1;
                self.depth += 1;
                let inner = self.policy()?;
                self.depth -= 1;
                if self.peek() != Some(&Token::Close) {
                    return Err(self.err("a ')' is missing"));
                }
                self.at += 1;
                Ok(inner)
            }
            Some(Token::Close) => Err(self.err("an attribute or '(' was expected, not ')'")),
            Some(Token::And) | Some(Token::Or) => {
                Err(self.err("an attribute or '(' was expected, not 'and'/'or'"))
            }
            None => Err(self.err("the policy ends where an attribute was expected")),
        }
    }
}

impl Policy {
    /// Parses `text`; an empty or malformed policy is an error saying where.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            let mut shown = MAX_POLICY_BYTES.min(64);
            while !text.is_char_boundary(shown) {
                shown -= 1;
            }
            return Err(PolicyError {
                policy: format!("{}...", &text[..shown]),
                at: MAX_POLICY_BYTES,
                why: format!(
                    "a policy has at most {MAX_POLICY_BYTES} bytes, this one {}",
                    text.len()
                ),
            });
        }
        let tokens = tokens(text)?;
        let words = tokens
            .iter()
            .filter(|(_, t)| matches!(t, Token::Word(_)))
            .count();
        let mut p = Parser {
            text,
            tokens,
            at: 0,
            depth: 0,
        };
        if words > MAX_POLICY_ATTRIBUTES {
            return Err(p.err(&format!(
                "a policy names at most {MAX_POLICY_ATTRIBUTES} attributes, this one {words}"
            )));
        }
        let policy = p.policy()?;
        if p.at != p.tokens.len() {
            return Err(p.err("this is left over after a complete policy"));
        }
        Ok(policy)
    }

    /// Whether a key holding `attributes` satisfies the policy.
    pub fn satisfied_by(&self, attributes: &[&str]) -> bool {
        match self {
            Policy::Attribute(a) => attributes.contains(&a.as_str()),
            Policy::And(ps) => ps.iter().all(|p| p.satisfied_by(attributes)),
            Policy::Or(ps) => ps.iter().any(|p| p.satisfied_by(attributes)),
        }
    }

    /// The policy in the scheme's language: every AND and OR node has two
    /// children (nested to the right), every attribute is quoted.
    pub fn to_pairs(&self) -> String {
        match self {
            Policy::Attribute(a) => format!("\"{a}\""),
            Policy::And(ps) => pairs(ps, "and"),
            Policy::Or(ps) => pairs(ps, "or"),
        }
    }
}

fn pairs(ps: &[Policy], op: &str) -> String {
    match ps {
        [] => unreachable!("parsed nodes have children"),
        [one] => one.to_pairs(),
        [first, rest @ ..] => format!("({} {op} {})", first.to_pairs(), pairs(rest, op)),
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_pairs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile policies (they also come from the S-DSM, in epoch records)
    /// are refused with an error, never a stack overflow.
    #[test]
    fn deep_long_or_wide_policies_are_refused() {
        let deep = format!("{}a{}", "(".repeat(1_000_000), ")".repeat(1_000_000));
        let e = Policy::parse(&deep).unwrap_err();
        assert!(e.why.contains("at most"), "{e}");
        let nested = |n: usize| format!("{}a{}", "(".repeat(n), ")".repeat(n));
        assert!(Policy::parse(&nested(MAX_POLICY_DEPTH)).is_ok());
        let e = Policy::parse(&nested(MAX_POLICY_DEPTH + 1)).unwrap_err();
        assert!(e.why.contains("nest more than"), "{e}");
        let wide = |n: usize| vec!["a"; n].join(" and ");
        assert!(Policy::parse(&wide(MAX_POLICY_ATTRIBUTES)).is_ok());
        let e = Policy::parse(&wide(MAX_POLICY_ATTRIBUTES + 1)).unwrap_err();
        assert!(e.why.contains("attributes"), "{e}");
    }

    #[test]
    fn and_binds_tighter_than_or_and_keywords_ignore_case() {
        let p = Policy::parse("tenant-a AND analyst Or admin").unwrap();
        assert_eq!(p.to_pairs(), r#"(("tenant-a" and "analyst") or "admin")"#);
    }

    #[test]
    fn three_children_become_nested_pairs() {
        let p = Policy::parse("a and b_1 and c-2 and d").unwrap();
        assert_eq!(p.to_pairs(), r#"("a" and ("b_1" and ("c-2" and "d")))"#);
        let p = Policy::parse("(x or y or z)").unwrap();
        assert_eq!(p.to_pairs(), r#"("x" or ("y" or "z"))"#);
    }

    #[test]
    fn satisfaction_follows_the_formula() {
        let p = Policy::parse("(tenant_a and analyst) or admin").unwrap();
        assert!(p.satisfied_by(&["tenant_a", "analyst"]));
        assert!(p.satisfied_by(&["admin"]));
        assert!(!p.satisfied_by(&["tenant_a"]));
        assert!(!p.satisfied_by(&["tenant_b", "analyst"]));
        assert!(!p.satisfied_by(&["tenant", "analyst"]));
    }

    #[test]
    fn malformed_policies_say_where() {
        for (text, at) in [
            ("", 0),
            ("a and", 5),
            ("(a or b", 7),
            ("a b", 2),
            ("a and or b", 6),
            ("a & b", 2),
            (")", 0),
        ] {
            let e = Policy::parse(text).unwrap_err();
            assert_eq!(e.at, at, "{text:?}: {e}");
        }
    }
}
