#include "shim.h"

struct fi_info *sat_fi_allocinfo(void) { return fi_allocinfo(); }
struct fi_info *sat_fi_dupinfo(const struct fi_info *info) { return fi_dupinfo(info); }
int sat_fi_close(struct fid *fid) { return fi_close(fid); }

int sat_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	return fi_fabric(attr, fabric, context);
}

int sat_fi_domain(struct fid_fabric *fabric, struct fi_info *info,
		  struct fid_domain **domain, void *context)
{
	return fi_domain(fabric, info, domain, context);
}

int sat_fi_endpoint(struct fid_domain *domain, struct fi_info *info,
		    struct fid_ep **ep, void *context)
{
	return fi_endpoint(domain, info, ep, context);
}

int sat_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		   struct fid_av **av, void *context)
{
	return fi_av_open(domain, attr, av, context);
}

int sat_fi_av_insert(struct fid_av *av, const void *addr, size_t count,
		     fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}

int sat_fi_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	return fi_av_remove(av, fi_addr, count, flags);
}

const char *sat_fi_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len)
{
	return fi_av_straddr(av, addr, buf, len);
}

int sat_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		   struct fid_cq **cq, void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}

int sat_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{
	return fi_ep_bind(ep, bfid, flags);
}

int sat_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }

int sat_fi_getname(fid_t fid, void *addr, size_t *addrlen)
{
	return fi_getname(fid, addr, addrlen);
}

ssize_t sat_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		     fi_addr_t dest_addr, uint64_t tag, void *context)
{
	return fi_tsend(ep, buf, len, desc, dest_addr, tag, context);
}

ssize_t sat_fi_tinject(struct fid_ep *ep, const void *buf, size_t len,
		       fi_addr_t dest_addr, uint64_t tag)
{
	return fi_tinject(ep, buf, len, dest_addr, tag);
}

ssize_t sat_fi_tinjectdata(struct fid_ep *ep, const void *buf, size_t len,
			   uint64_t data, fi_addr_t dest_addr, uint64_t tag)
{
	return fi_tinjectdata(ep, buf, len, data, dest_addr, tag);
}

ssize_t sat_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		     fi_addr_t src_addr, uint64_t tag, uint64_t ignore, void *context)
{
	return fi_trecv(ep, buf, len, desc, src_addr, tag, ignore, context);
}

ssize_t sat_fi_cancel(fid_t fid, void *context) { return fi_cancel(fid, context); }

ssize_t sat_fi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return fi_cq_read(cq, buf, count);
}

ssize_t sat_fi_cq_readfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr)
{
	return fi_cq_readfrom(cq, buf, count, src_addr);
}

int sat_fi_control(struct fid *fid, int command, void *arg)
{
	return fi_control(fid, command, arg);
}

int sat_fi_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	return fi_trywait(fabric, fids, count);
}

ssize_t sat_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}

const char *sat_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
			       char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}

int sat_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len,
		  uint64_t access, uint64_t offset, uint64_t requested_key,
		  uint64_t flags, struct fid_mr **mr, void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context);
}

void *sat_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
uint64_t sat_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }

ssize_t sat_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc,
		    fi_addr_t src_addr, uint64_t addr, uint64_t key, void *context)
{
	return fi_read(ep, buf, len, desc, src_addr, addr, key, context);
}

ssize_t sat_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context)
{
	return fi_write(ep, buf, len, desc, dest_addr, addr, key, context);
}
