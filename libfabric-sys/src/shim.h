/*
 * Real symbols for libfabric's static-inline calls, which bindgen cannot bind
 * (they dispatch through the provider's ops tables inside the header).
 */
#ifndef SAT_FI_SHIM_H
#define SAT_FI_SHIM_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_eq.h>

struct fi_info *sat_fi_allocinfo(void);
struct fi_info *sat_fi_dupinfo(const struct fi_info *info);
int sat_fi_close(struct fid *fid);

int sat_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int sat_fi_domain(struct fid_fabric *fabric, struct fi_info *info,
		  struct fid_domain **domain, void *context);
int sat_fi_endpoint(struct fid_domain *domain, struct fi_info *info,
		    struct fid_ep **ep, void *context);
int sat_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		   struct fid_av **av, void *context);
int sat_fi_av_insert(struct fid_av *av, const void *addr, size_t count,
		     fi_addr_t *fi_addr, uint64_t flags, void *context);
int sat_fi_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags);
const char *sat_fi_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len);
int sat_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		   struct fid_cq **cq, void *context);
int sat_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int sat_fi_enable(struct fid_ep *ep);
int sat_fi_getname(fid_t fid, void *addr, size_t *addrlen);

ssize_t sat_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		     fi_addr_t dest_addr, uint64_t tag, void *context);
ssize_t sat_fi_tinject(struct fid_ep *ep, const void *buf, size_t len,
		       fi_addr_t dest_addr, uint64_t tag);
ssize_t sat_fi_tinjectdata(struct fid_ep *ep, const void *buf, size_t len,
			   uint64_t data, fi_addr_t dest_addr, uint64_t tag);
ssize_t sat_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		     fi_addr_t src_addr, uint64_t tag, uint64_t ignore, void *context);
ssize_t sat_fi_cancel(fid_t fid, void *context);

ssize_t sat_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t sat_fi_cq_readfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr);
ssize_t sat_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
int sat_fi_control(struct fid *fid, int command, void *arg);
int sat_fi_trywait(struct fid_fabric *fabric, struct fid **fids, int count);
const char *sat_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
			       char *buf, size_t len);

int sat_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len,
		  uint64_t access, uint64_t offset, uint64_t requested_key,
		  uint64_t flags, struct fid_mr **mr, void *context);
void *sat_fi_mr_desc(struct fid_mr *mr);
uint64_t sat_fi_mr_key(struct fid_mr *mr);

ssize_t sat_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc,
		    fi_addr_t src_addr, uint64_t addr, uint64_t key, void *context);
ssize_t sat_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context);

#endif
