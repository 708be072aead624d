#!/usr/bin/env bash
# Adds Debian bookworm-backports to apt's sources (Mesa's lavapipe for the --device webgpu
# tests: Dawn refuses bookworm's own Mesa), from the mirror apt already uses for bookworm:
# a fixed deb.debian.org broke hosts on another mirror or a snapshot. The first enabled
# `deb` source of suite bookworm gives the URIs and options, in the one-line format
# (sources.list, sources.list.d/*.list) or deb822 (sources.list.d/*.sources), and the new
# source is written in the same format; deb.debian.org only when there is none. Nothing
# is written when a bookworm-backports source is already there. As root, then apt-get update:
#   scripts/add-backports.sh
# APT_ETC_DIR: apt's folder (default /etc/apt), for tests.
set -euo pipefail
etc="${APT_ETC_DIR:-/etc/apt}"
shopt -s nullglob
lists=("$etc/sources.list" "$etc"/sources.list.d/*.list)
deb822=("$etc"/sources.list.d/*.sources)

# One-line: deb [options] URI suite component…  ('#' starts a comment)
one_line='^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+([^[:space:]]+)'
mirror=""
for file in "${lists[@]}"; do
  [ -f "$file" ] || continue
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%%#*}"
    [[ $line =~ $one_line ]] || continue
    case "${BASH_REMATCH[3]}" in
      bookworm-backports) echo "bookworm-backports is already in apt's sources ($file)"; exit 0 ;;
      bookworm) [ -n "$mirror" ] || mirror="deb ${BASH_REMATCH[1]}${BASH_REMATCH[2]} bookworm-backports main" ;;
    esac
  done <"$file"
done

# deb822: stanzas of "Field: value" lines (continuation lines start with a space), blank
# lines between; field names in any case. The bookworm stanza is copied whole (a snapshot's
# Check-Valid-Until, an inline Signed-By key), its Types, Suites and Components replaced.
stanza=""
found=""
consider() {
  local types="" suites="" enabled="yes" l
  while IFS= read -r l; do
    case "${l,,}" in
      types:*) types=" ${l#*:} " ;;
      suites:*) suites=" ${l#*:} " ;;
      enabled:*) enabled="${l#*:}" enabled="${enabled//[[:space:]]/}" ;;
    esac
  done <<<"$stanza"
  [[ ${enabled,,} != no && $types =~ [[:space:]]deb[[:space:]] ]] || return 0
  if [[ $suites =~ [[:space:]]bookworm-backports[[:space:]] ]]; then
    echo "bookworm-backports is already in apt's sources ($1)"
    exit 0
  fi
  if [ -z "$found" ] && [[ $suites =~ [[:space:]]bookworm[[:space:]] ]]; then
    found="$(printf '%s\n' "$stanza" | awk '
      tolower($0) ~ /^(types|suites|components):/ { skip = 1; next }
      /^[ \t]/ && skip { next }
      { skip = 0; print }')"
    found="Types: deb
${found}
Suites: bookworm-backports
Components: main"
  fi
}
for file in "${deb822[@]}"; do
  stanza=""
  while IFS= read -r line || [ -n "$line" ]; do
    if [[ $line =~ ^[[:space:]]*$ ]]; then
      [ -z "$stanza" ] || consider "$file"
      stanza=""
    elif [[ $line != \#* ]]; then
      stanza+="${stanza:+$'\n'}$line"
    fi
  done <"$file"
  [ -z "$stanza" ] || consider "$file"
done

mkdir -p "$etc/sources.list.d"
if [ -n "$mirror" ] || [ -z "$found" ]; then
  out="$etc/sources.list.d/bookworm-backports.list"
  printf '%s\n' "${mirror:-deb http://deb.debian.org/debian bookworm-backports main}" >"$out"
  [ -n "$mirror" ] || echo "no bookworm source in $etc: deb.debian.org"
else
  out="$etc/sources.list.d/bookworm-backports.sources"
  printf '%s\n' "$found" >"$out"
fi
echo "bookworm-backports added: $out"
