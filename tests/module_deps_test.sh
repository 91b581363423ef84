#!/usr/bin/env bash
# tests/module_deps_test.sh — the modules under src/ depend on each other without a cycle, and
# the layers point one way.
#
#   tests/module_deps_test.sh [REPO_ROOT]      (default: the folder above this script)
#
# The module graph is that of library code: starting from every src/<m>/*.cc that is not a
# test (*_test.cc) or a benchmark (*_bench.cc), it follows each `#include "<x>/<file>"` whose
# src/<x>/<file> exists, through headers too; an include from a file of src/<m>/ of a file of
# src/<x>/ (x != m) is the edge m -> x. Prints each module's dependencies with one include that
# makes each edge, then a build order (dependencies first). Fails (exit 1) naming the modules
# of a cycle and the includes that close it.
# It first checks itself on two small trees (one with a cycle, one without), so a checker that
# stopped seeing includes fails instead of passing.
#
# Layers (docs/architecture.md): what a worker process links must carry nothing of the switch
# or of the controller's services. So the modules client, rendezvous and control may not reach
# (through any chain of includes) dataplane or controller, and the public headers
# (include/switchml/) and the integrations (integrations/) may include no module of src/ at all
# (only "switchml/..."; their tests, under tests/ or *_test.cc, may use src/testing). Fails naming the chain of includes that breaks a layer. Checked on a
# small bad tree first too.
set -euo pipefail

# graph ROOT: prints "m -> x   (file includes "x/...")" lines, then "order: ..." or the cycle;
# returns 1 on a cycle.
graph() {
  local root=$1
  local -A seen=() deps=() witness=()
  local -a queue=() modules=()
  local m f
  for m in "$root"/src/*/; do
    m=${m%/}
    m=${m##*/}
    modules+=("$m")
    deps[$m]=""
    for f in "$root/src/$m"/*.cc; do
      [[ -e $f ]] || continue
      [[ $f == *_test.cc || $f == *_bench.cc ]] && continue
      queue+=("src/$m/${f##*/}")
    done
  done
  local i=0 file mod inc target tmod
  while ((i < ${#queue[@]})); do
    file=${queue[i]}
    i=$((i + 1))
    [[ -n ${seen[$file]:-} ]] && continue
    seen[$file]=1
    mod=${file#src/}
    mod=${mod%%/*}
    while IFS= read -r inc; do
      target="src/$inc"
      [[ -f "$root/$target" ]] || continue  # include/switchml/, hwy/, generated headers
      queue+=("$target")
      tmod=${inc%%/*}
      [[ $tmod == "$mod" ]] && continue
      if [[ " ${deps[$mod]} " != *" $tmod "* ]]; then
        deps[$mod]="${deps[$mod]} $tmod"
        witness[$mod/$tmod]="$file includes \"$inc\""
      fi
    done < <(sed -nE 's@^[[:space:]]*#[[:space:]]*include[[:space:]]*"([A-Za-z0-9_]+/[^"]+)".*@\1@p' "$root/$file")
  done

  for m in "${modules[@]}"; do
    local d
    if [[ -z ${deps[$m]} ]]; then
      echo "$m -> (nothing)"
    fi
    for d in ${deps[$m]}; do
      echo "$m -> $d   (${witness[$m/$d]})"
    done
  done

  # Depth-first search: colour 1 = on the current path, 2 = done.
  local -A colour=()
  local -a path=() order=()
  local cycle=""
  visit() {
    local n=$1 d k
    colour[$n]=1
    path+=("$n")
    for d in ${deps[$n]}; do
      if [[ ${colour[$d]:-0} == 1 ]]; then
        # The cycle: from d's place on the path back to d.
        local out="" from=""
        for k in "${path[@]}"; do
          [[ $k == "$d" ]] && from=1
          [[ -n $from ]] && out+="$k -> "
        done
        cycle="${out}$d"
        local prev=""
        for k in ${out//->/} "$d"; do
          [[ -n $prev ]] && cycle+=$'\n'"  ${witness[$prev/$k]}"
          prev=$k
        done
        return 1
      fi
      if [[ ${colour[$d]:-0} == 0 ]]; then
        visit "$d" || return 1
      fi
    done
    unset 'path[${#path[@]}-1]'
    colour[$n]=2
    order+=("$n")
  }
  for m in "${modules[@]}"; do
    if [[ ${colour[$m]:-0} == 0 ]]; then
      if ! visit "$m"; then
        echo "cycle: $cycle"
        return 1
      fi
    fi
  done
  echo "order: ${order[*]}"
}

# reach GRAPH_OUTPUT FROM: the modules FROM reaches, one per line, each as "x  via m -> ... -> x".
reach() {
  local out=$1 from=$2
  local -A next=() seen=() via=()
  local line a b
  while IFS= read -r line; do
    [[ $line =~ ^([a-z_0-9]+)\ -\>\ ([a-z_0-9]+)\ \  ]] || continue
    a=${BASH_REMATCH[1]}
    b=${BASH_REMATCH[2]}
    next[$a]="${next[$a]:-} $b"
  done <<<"$out"
  local -a queue=("$from")
  via[$from]=$from
  seen[$from]=1
  local i=0 m d
  while ((i < ${#queue[@]})); do
    m=${queue[i]}
    i=$((i + 1))
    for d in ${next[$m]:-}; do
      [[ -n ${seen[$d]:-} ]] && continue
      seen[$d]=1
      via[$d]="${via[$m]} -> $d"
      queue+=("$d")
      echo "$d  via ${via[$d]}"
    done
  done
}

# layers ROOT GRAPH_OUTPUT: prints each broken layer; returns 1 if any.
layers() {
  local root=$1 out=$2 bad=0 m r line f
  for m in client rendezvous control; do
    [[ -d $root/src/$m ]] || continue
    while IFS= read -r line; do
      r=${line%%  *}
      if [[ $r == dataplane || $r == controller ]]; then
        echo "layer broken: src/$m reaches src/$r ($line); a worker process would carry it"
        bad=1
      fi
    done < <(reach "$out" "$m")
  done
  while IFS= read -r f; do
    while IFS= read -r line; do
      echo "layer broken: ${f#"$root"/} includes \"$line\" (public headers and integrations use \"switchml/...\" only)"
      bad=1
    done < <(sed -nE 's@^[[:space:]]*#[[:space:]]*include[[:space:]]*"([A-Za-z0-9_]+/[^"]+)".*@\1@p' "$f" |
             while IFS= read -r inc; do [[ -f "$root/src/$inc" ]] && echo "$inc"; done)
  done < <(find "$root/include" "$root/integrations" -type f \( -name '*.h' -o -name '*.cc' \) \
             -not -path '*/tests/*' -not -name '*_test.cc' 2>/dev/null)
  return $bad
}

# Self-check on two small trees.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/good/src/{a,b,c} "$tmp"/bad/src/{a,b,c}
for t in good bad; do
  printf '#include "b/b.h"\n#include "switchml/status.h"\n' >"$tmp/$t/src/a/a.cc"
  printf '#pragma once\n#include "c/c.h"\n' >"$tmp/$t/src/b/b.h"
  printf '#include "b/b.h"\n' >"$tmp/$t/src/b/b.cc"
  printf '#pragma once\n' >"$tmp/$t/src/c/c.h"
  printf '#include "a/a.h"\n' >"$tmp/$t/src/c/c_test.cc"  # tests do not count
  printf '#pragma once\n' >"$tmp/$t/src/a/a.h"
done
printf '#pragma once\n  #  include "a/a.h"  // closes the cycle\n' >"$tmp/bad/src/c/c.h"
if ! out=$(graph "$tmp/good"); then
  echo "FAIL: self-check: a tree without a cycle was reported as one:"$'\n'"$out"
  exit 1
fi
if [[ $out != *"order: c b a"* ]]; then
  echo "FAIL: self-check: wrong order for a -> b -> c:"$'\n'"$out"
  exit 1
fi
if out=$(graph "$tmp/bad"); then
  echo "FAIL: self-check: the cycle a -> b -> c -> a was not found:"$'\n'"$out"
  exit 1
fi
if [[ $out != *"cycle: a -> b -> c -> a"* || $out != *'src/c/c.h includes "a/a.h"'* ]]; then
  echo "FAIL: self-check: the cycle a -> b -> c -> a was misreported:"$'\n'"$out"
  exit 1
fi

# ... and of the layers: client -> rendezvous -> dataplane breaks one, as does a public header
# that includes a module.
mkdir -p "$tmp"/layers/src/{client,rendezvous,dataplane} "$tmp"/layers/include/switchml
printf '#include "rendezvous/r.h"\n' >"$tmp/layers/src/client/c.cc"
printf '#pragma once\n#include "dataplane/d.h"\n' >"$tmp/layers/src/rendezvous/r.h"
printf '#pragma once\n' >"$tmp/layers/src/dataplane/d.h"
printf '#pragma once\n#include "rendezvous/r.h"\n' >"$tmp/layers/include/switchml/api.h"
out=$(graph "$tmp/layers") || { echo "FAIL: self-check: the layer tree has a cycle:"$'\n'"$out"; exit 1; }
if lout=$(layers "$tmp/layers" "$out"); then
  echo "FAIL: self-check: client -> rendezvous -> dataplane was not reported"
  exit 1
fi
if [[ $lout != *"src/client reaches src/dataplane (dataplane  via client -> rendezvous -> dataplane)"* ||
      $lout != *'include/switchml/api.h includes "rendezvous/r.h"'* ]]; then
  echo "FAIL: self-check: the broken layers were misreported:"$'\n'"$lout"
  exit 1
fi

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
if ! out=$(graph "$root"); then
  echo "$out"
  echo "FAIL: the modules under src/ have an include cycle (see above)"
  exit 1
fi
echo "$out"
if ! layers "$root" "$out"; then
  echo "FAIL: a layer is broken (see above)"
  exit 1
fi
echo "PASS: no include cycle between the modules under src/, and the layers point one way"
