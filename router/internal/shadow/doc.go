// Package shadow evaluates a candidate policy on live traffic without
// affecting it (serve --shadow FILE): each request's live decision is
// paired with the candidate's, counted by pool and route, and summed up
// for /admin/shadow. The candidate routes over the running pools and
// shares the running classifier; a call the candidate alone needs is made
// off the request's path, and bounded.
package shadow
