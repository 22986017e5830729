//! How a command line is handed to `sh -c`.
//!
//! Debian's `dash` forks even for a single command, which would make the shell the "main"
//! process and the user's program a descendant. For a single simple command the tracker asks the
//! shell to `exec` it, so main is the user's program (as in `gpu_tracker`, which runs the
//! command without a shell). Pipelines, lists, subshells, compound commands, builtins and
//! assignment prefixes keep plain `sh -c` semantics: main is then the shell.

/// Shell words that are not programs: `exec`-ing them would fail or change meaning.
const NOT_PROGRAMS: &[&str] = &[
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then",
    "until", "while", "function", "select", "time", ".", ":", "alias", "bg", "break", "cd",
    "command", "continue", "eval", "exec", "exit", "export", "fg", "getopts", "hash", "jobs",
    "local", "read", "readonly", "return", "set", "shift", "source", "times", "trap", "type",
    "ulimit", "umask", "unalias", "unset", "wait",
];

/// Whether `command` is one simple command: no unquoted `;`, `&`, `|`, `(`, `)` or newline, a
/// first word that is a program name (not a keyword or builtin) and no `NAME=value` prefix.
pub fn is_simple_command(command: &str) -> bool {
    let (mut single, mut double, mut escaped) = (false, false, false);
    for c in command.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            ';' | '&' | '|' | '(' | ')' | '\n' | '`' if !single && !double => return false,
            _ => {}
        }
    }
    if single || double || escaped {
        return false; // let the shell report the syntax error
    }
    let Some(first) = command.split_whitespace().next() else {
        return false;
    };
    !first.contains('=') && !NOT_PROGRAMS.contains(&first)
}

/// The script given to `sh -c`: `exec COMMAND` for a simple command, else the command itself.
pub fn shell_script(command: &str) -> String {
    if is_simple_command(command) {
        format!("exec {command}")
    } else {
        command.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_commands_are_execed() {
        for c in [
            "python3 train.py --lr=0.1",
            "python3 -c 'import time; time.sleep(1)'",
            "echo \"a;b|c\" > out.txt",
            "ls *.txt $HOME",
            "printf %s\\;x",
        ] {
            assert!(is_simple_command(c), "{c}");
            assert_eq!(shell_script(c), format!("exec {c}"));
        }
    }

    #[test]
    fn compound_commands_keep_the_shell() {
        for c in [
            "a | b",
            "a; b",
            "a && b",
            "sleep 1 &",
            "(cd x && make)",
            "cd /tmp",
            "FOO=1 prog",
            "for i in 1 2; do echo $i; done",
            "echo $(date)",
            "echo 'unterminated",
            "   ",
            "a\nb",
        ] {
            assert!(!is_simple_command(c), "{c:?}");
            assert_eq!(shell_script(c), c);
        }
    }
}
