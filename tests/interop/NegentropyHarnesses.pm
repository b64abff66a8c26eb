# Adds this package's harness to the harness list of the reference fuzzer
# (hoytech/negentropy test/Utils.pm) without changing the reference's files:
#
#   cd $NEGENTROPY_DIR/test
#   OURS_HARNESS="python -m openprocurement_feed.reconcile.harness" \
#       perl -I. -I/path/to/tests/interop -MNegentropyHarnesses fuzz.pl py js
#
# Loaded first (-M), it loads the reference's Utils.pm and wraps its
# harnessTypeToCmd: the harness type "py" runs the command of OURS_HARNESS,
# every other type is the reference's own.
package NegentropyHarnesses;

use strict;
use warnings;

require Utils;

{
    no warnings 'redefine';
    my $reference = \&Utils::harnessTypeToCmd;
    *Utils::harnessTypeToCmd = sub {
        my $harnessType = shift;
        if ($harnessType eq 'py') {
            return $ENV{OURS_HARNESS} || die "OURS_HARNESS is not set: the command of the Python harness";
        }
        return $reference->($harnessType);
    };
}

1;
