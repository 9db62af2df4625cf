#!/usr/bin/env bash
# No function of the C files in the given folders may be more complex than
# LIMIT, in pmccabe's traditional McCabe number (its second column): a
# function past it does too many things to read, test or change one at a
# time, and is split instead. Every *.c of a folder counts, so a file added
# there is checked without being named anywhere.
#
# usage: complexity.sh LIMIT DIR...
#   e.g. complexity.sh 30 tools/bench   (tests/lint/meson.build runs it)
. "$(dirname "$0")/../harness/harness.sh"
[ $# -ge 2 ] || { echo "usage: $0 LIMIT DIR..."; exit 2; }
limit=$1
shift
need_cmd pmccabe pmccabe

files=()
for dir in "$@"; do
    [ -d "$dir" ] || { fail "$dir is not a folder"; continue; }
    for f in "$dir"/*.c; do
        [ -f "$f" ] && files+=("$f")
    done
done
[ ${#files[@]} -gt 0 ] || { fail "no C file in $*"; finish; }

# One line per function: modified, traditional, statements, first line,
# lines, "file(line): name".
pmccabe "${files[@]}" >"$TMP/all" 2>"$TMP/err" || { cat "$TMP/err"; fail "pmccabe failed"; finish; }
functions=$(wc -l <"$TMP/all")
[ "$functions" -gt 0 ] || fail "pmccabe found no function in ${files[*]}"
awk -v limit="$limit" '$2 > limit { n = $2; $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print n "\t" $0 }' \
    "$TMP/all" | sort -t"$(printf '\t')" -k1,1nr >"$TMP/over"
while IFS=$'\t' read -r n where; do
    fail "$where has complexity $n, above $limit: split it"
done <"$TMP/over"
[ -s "$TMP/over" ] || pass "$functions functions in ${#files[@]} files, none above complexity $limit"
finish
