# SPDX-License-Identifier: GPL-2.0
#
# MetaRoCE top-level Makefile.
#
#   make                      build rdma_metaroce.ko against $(KDIR) (default: the cached
#                             plain test kernel; any prepared Rust-enabled tree works)
#   make demo                 boot the test kernel and show two hosts with MetaRoCE links
#   make check                every test: host (cargo) tests, then the VM tiers
#   make vm-shell             boot the test kernel with an interactive shell
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
KDIR ?= $(shell $(REPO)/tools/mkkernel $(FLAVOUR))
else
KDIR ?=
endif

BINDINGS := $(REPO)/rdma_metaroce/ffi/bindings_generated.rs

.PHONY: all modules bindings clean demo check test vm-shell bench host-test

ifeq ($(IN_ROOT),1)
all modules: bindings
	$(MAKE) -C $(KDIR) M=$(REPO) LLVM=1 modules

# The bindings depend on the exact kernel configuration: regenerate them whenever
# KDIR's bindgen command line changes (a different tree or config).
bindings:
	@stamp=$$(sha256sum $(KDIR)/rust/bindings/.bindings_generated.rs.cmd $(REPO)/rdma_metaroce/ffi/*.h $(REPO)/rdma_metaroce/ffi/gen-bindings.sh | sha256sum | cut -c1-16); \
	if [ ! -f $(BINDINGS) ] || ! grep -q "^// stamp: $$stamp" $(BINDINGS); then \
		echo "  BINDGEN rdma_metaroce/ffi/bindings_generated.rs"; \
		$(REPO)/rdma_metaroce/ffi/gen-bindings.sh $(KDIR) $(BINDINGS) && \
		sed -i "1i // stamp: $$stamp" $(BINDINGS); \
	fi

clean:
	-$(MAKE) -C $(KDIR) M=$(REPO) LLVM=1 clean
	rm -f $(BINDINGS)
else
all modules bindings clean:
	$(REPO)/tools/inroot $(MAKE) -C $(REPO) $@ $(if $(KDIR),KDIR=$(KDIR)) FLAVOUR=$(FLAVOUR)
endif

demo:
	$(REPO)/tools/demo

check test:
	$(REPO)/tools/check

vm-shell:
	$(REPO)/tools/vm --flavour $(FLAVOUR) --shell

endif
