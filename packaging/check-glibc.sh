#!/bin/bash
# Fails when an ELF file needs a glibc symbol version newer than the limit (2.28: RHEL 8).
#   packaging/check-glibc.sh [--max 2.28] FILE|DIR|PACKAGE...
# A directory is searched for ELF files; a .deb or .rpm is unpacked first. Prints each file's
# newest GLIBC_ need (readelf's version-needs section), then "N passed, N failed".
set -euo pipefail
max=2.28
if [[ ${1:-} == --max ]]; then max=$2; shift 2; fi
(($# > 0)) || { echo "usage: packaging/check-glibc.sh [--max 2.28] FILE|DIR|PACKAGE..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
add_tree() {
    local f
    while IFS= read -r -d '' f; do
        if [[ $(head -c4 "$f" | od -An -c | tr -d ' ') == 177ELF ]]; then files+=("$f"); fi
    done < <(find "$1" -type f -print0)
}
n=0
for a in "$@"; do
    [[ -e $a ]] || { echo "check-glibc: $a: no such file" >&2; exit 2; }
    a=$(readlink -f "$a")
    case $a in
    *.deb) n=$((n + 1)); mkdir -p "$tmp/$n"; dpkg-deb -x "$a" "$tmp/$n"; add_tree "$tmp/$n" ;;
    *.rpm) n=$((n + 1)); mkdir -p "$tmp/$n"; (cd "$tmp/$n" && rpm2cpio "$a" | cpio -idm --quiet); add_tree "$tmp/$n" ;;
    *) if [[ -d $a ]]; then add_tree "$a"; else files+=("$a"); fi ;;
    esac
done
((${#files[@]} > 0)) || { echo "check-glibc: no ELF file in $*" >&2; exit 1; }
# sort -V orders 2.9 before 2.28 (a plain sort would not).
newer() { [[ $1 != "$2" && $(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n1) == "$1" ]]; }
passed=0 failed=0
for f in "${files[@]}"; do
    need=$(readelf -W --version-info "$f" 2>/dev/null |
        sed -n 's/.*Name: GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -Vu | tail -n1)
    name=${f#"$tmp"/*/}
    if [[ -z $need ]]; then
        echo "ok      $name: no GLIBC_ version needed"
        passed=$((passed + 1))
    elif newer "$need" "$max"; then
        echo "FAILED  $name: needs GLIBC_$need, above $max"
        failed=$((failed + 1))
    else
        echo "ok      $name: needs GLIBC_$need at most"
        passed=$((passed + 1))
    fi
done
echo "check-glibc: $passed passed, $failed failed"
((failed == 0))
