# SPDX-License-Identifier: GPL-2.0
#
# MetaRoCE top-level Makefile.
#
#   make                      build rdma_metaroce.ko against $(KDIR) (default: the cached
#                             plain test kernel; any prepared Rust-enabled tree works)
#   make demo                 boot the test kernel and show two hosts with MetaRoCE links
#   make check                every test: host (cargo) tests, then the VM tiers
#   make vm-shell             boot the test kernel with an interactive shell
#   make deb                  Debian packages (DKMS source, rdma-core provider)
#   make FLAVOUR=stock        build against Debian's stock kernel (tools/stock-kernel)
#   make clean
#
# `make` outside the toolchain root re-enters itself inside it (tools/inroot), so the
# only host requirements are bash, apt and root.

ifneq ($(KERNELRELEASE),)
include $(src)/Kbuild
else

REPO := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
IN_ROOT := $(shell test -e /usr/src/linux-source-7.2.tar.xz && echo 1)
FLAVOUR ?= plain

ifeq ($(IN_ROOT),1)
ifeq ($(FLAVOUR),stock)
KDIR ?= $(shell $(REPO)/tools/stock-kernel)
else
KDIR ?= $(shell $(REPO)/tools/mkkernel $(FLAVOUR))
endif
else
KDIR ?=
endif
# A prepared tree records the compiler it was configured with (Debian's stock kernel
# is gcc-built); our test kernels are clang-built (Rust + KASAN need LLVM=1).
KBUILD_ARGS ?= $(if $(wildcard $(KDIR)/kbuild-args),$(shell cat $(KDIR)/kbuild-args),LLVM=1)

BINDINGS := $(REPO)/rdma_metaroce/ffi/bindings_generated.rs

.PHONY: all modules bindings clean demo check test vm-shell deb testmods

ifeq ($(IN_ROOT),1)
all modules: bindings
	$(MAKE) -C $(KDIR) M=$(REPO) $(KBUILD_ARGS) modules

# The bindings depend on the exact kernel configuration: regenerate them whenever
# KDIR's bindgen command line changes (a different tree or config).
bindings:
	@stamp=$$(sha256sum $(KDIR)/rust/bindings/.bindings_generated.rs.cmd $(REPO)/rdma_metaroce/ffi/*.h $(REPO)/rdma_metaroce/uapi/*.h $(REPO)/rdma_metaroce/ffi/gen-bindings.sh | sha256sum | cut -c1-16); \
	if [ ! -f $(BINDINGS) ] || ! grep -q "^// stamp: $$stamp" $(BINDINGS); then \
		echo "  BINDGEN rdma_metaroce/ffi/bindings_generated.rs"; \
		$(REPO)/rdma_metaroce/ffi/gen-bindings.sh $(KDIR) $(BINDINGS) && \
		sed -i "1i // stamp: $$stamp" $(BINDINGS); \
	fi

# Kernel modules used only by the selftests (a kernel verbs consumer).
testmods:
	$(MAKE) -C $(KDIR) M=$(REPO)/selftests/rdma/kverbs $(KBUILD_ARGS) modules

clean:
	-$(MAKE) -C $(KDIR) M=$(REPO) $(KBUILD_ARGS) clean
	-$(MAKE) -C $(KDIR) M=$(REPO)/selftests/rdma/kverbs $(KBUILD_ARGS) clean
	rm -f $(BINDINGS)
else
all modules bindings clean testmods:
	$(REPO)/tools/inroot $(MAKE) -C $(REPO) $@ $(if $(KDIR),KDIR=$(KDIR)) FLAVOUR=$(FLAVOUR)
endif

demo:
	$(REPO)/tools/demo

check test:
	$(REPO)/tools/check

vm-shell:
	$(REPO)/tools/vm --flavour $(FLAVOUR) --shell

# Debian packages: metaroce-dkms (module source, built by DKMS on the host) and
# metaroce-ibverbs-provider; see packaging/README.md.
deb:
	$(REPO)/packaging/build-debs

# TCP vs rdma_rxe vs siw vs MetaRoCE side by side in one VM boot of the plain kernel
# (tools/bench, issue #5; not part of CI). The tables and target checks are printed
# and saved as out/bench-<date>/bench.txt, with bench.md, bench.json, bench.png and
# bench.csv. `make bench BENCH_QUICK=1` is the short version; other BENCH_* knobs
# pass through the environment (see tools/bench).
.PHONY: bench
bench:
	$(REPO)/tools/bench

endif
